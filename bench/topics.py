"""Benchmark: publish N messages to one topic, then consume them in G cluster groups (and optionally a
broadcast group with M members); messages/s each way, per group, median of --runs.

Publish: Publisher.publish_many, --batch messages per call (one transaction each); and single-message
publishes (one transaction each) from --publishers threads, which take turns on the topic's row.
Consume: one dispatcher and --workers worker processes start after the publish; a group's clock stops
when its backlog is 0 (every delivery done), a broadcast member's when it has read the last message.

    scripts/dev shell python bench/topics.py                          # 100,000 messages, 3 groups, 3 runs
    scripts/dev shell python bench/topics.py --messages 20000 --groups 1 --runs 1 --json /tmp/t.json

Runs in database duecast_bench / key prefix duecast-bench (see bench/harness.py); it empties the
topics tables of that database (prefix bench_) and the topics' keys of that prefix.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
from contextlib import closing
from pathlib import Path
from typing import Any

import harness
from bench_topics_app import CLUSTER
from rich.table import Table

from duecast.cli.demo.fleet import Fleet
from duecast.shared.api.publish import Publish, Publisher
from duecast.shared.settings import Settings, TopicsSettings, load_settings
from duecast.shared.storage.admin import migrate
from duecast.shared.storage.db import Database, connect
from duecast.shared.storage.topic_schema import KINDS

BENCH_DIR = Path(__file__).resolve().parent
APP = "bench_topics_app"
PREFIX = "bench_"


def topics(args: argparse.Namespace) -> dict[str, Any]:
    groups = [{"topic": "bench", "name": g, "start": "earliest"} for g in CLUSTER[: args.groups]]
    if args.members:
        groups.append({"topic": "bench", "name": "fanout", "mode": "broadcast", "start": "earliest"})
    return {"table_prefix": PREFIX, "names": ["bench"], "groups": groups}


def toml_fields(fields: dict[str, Any]) -> str:
    """`key = value` lines; lists of dicts as inline tables (JSON scalars are valid TOML)."""

    def value(v: Any) -> str:
        if isinstance(v, list):
            return "[" + ", ".join(value(x) for x in v) + "]"
        if isinstance(v, dict):
            return "{" + ", ".join(f"{k} = {value(x)}" for k, x in v.items()) + "}"
        return json.dumps(v)

    return "".join(f"{k} = {value(v)}\n" for k, v in fields.items())


def prepare(settings: Settings) -> None:
    with closing(connect(settings.mysql)) as conn, conn.cursor() as cur:
        for kind in KINDS:
            cur.execute(f"DROP TABLE IF EXISTS `{settings.topics.table(kind)}`")
    migrate.apply(settings)
    harness.clear_keys(settings, [s.name for s in settings.topics.group_sources()])


def publish(settings: Settings, messages: int, batch: int) -> float:
    publisher = Publisher(settings, None)
    try:
        started = time.perf_counter()
        for lo in range(0, messages, batch):
            publisher.publish_many(Publish("bench", {"i": i}) for i in range(lo, min(messages, lo + batch)))
        return time.perf_counter() - started
    finally:
        publisher.db.close()


def publish_single(settings: Settings, threads: int, seconds: float) -> float:
    """Messages/s with one message per transaction from `threads` publishers at once."""
    counts = [0] * threads
    stop = threading.Event()

    def loop(n: int) -> None:
        publisher = Publisher(settings, None)
        while not stop.is_set():
            publisher.publish("bench", {"single": n})
            counts[n] += 1
        publisher.db.close()

    workers = [threading.Thread(target=loop, args=(n,)) for n in range(threads)]
    for w in workers:
        w.start()
    time.sleep(seconds)
    stop.set()
    for w in workers:
        w.join()
    return sum(counts) / seconds


def consume(settings: Settings, args: argparse.Namespace, logs: Path) -> dict[str, float]:
    """Seconds from the fleet's start until each group (and broadcast member) is done."""
    config = logs / "topics.toml"
    config.write_text(f"[worker]\nconcurrency = {args.concurrency}\n[topics]\n" + toml_fields(topics(args)))
    fleet = Fleet(config, APP, logs, extra_env={"PYTHONPATH": str(BENCH_DIR)})
    cluster = [arg for g in CLUSTER[: args.groups] for arg in ("--source", f"topics.bench-{g}")]
    poll = Database(settings.mysql)
    done: dict[str, float] = {}
    started = time.perf_counter()
    fleet.start_dispatcher()
    for i in range(args.workers):
        fleet.start_worker(f"worker-{i + 1}", *cluster)
    for m in range(args.members):
        fleet.start_worker(f"member-{m + 1}", "--source", "topics.bench-fanout", "--member", f"m{m + 1}")
    try:
        while True:
            for name in finished(poll, settings, args.messages):
                done.setdefault(name, time.perf_counter() - started)
            if len(done) >= args.groups + args.members:
                return done
            if time.perf_counter() - started > args.timeout or len(fleet.alive()) < len(fleet.procs):
                raise SystemExit(f"consume did not finish in {args.timeout:.0f}s; process logs: {logs}")
            time.sleep(0.1)
    finally:
        fleet.stop()
        poll.close()


def finished(db: Database, settings: Settings, messages: int) -> list[str]:
    """Groups whose position reached the last message with nothing unfinished, and broadcast members
    that read it: a few index dives, so polling does not load the database it measures."""
    t = {k: f"`{settings.topics.table(k)}`" for k in ("groups", "deliveries", "members")}
    with db.transaction() as cur:
        cur.execute(
            f"SELECT g.name FROM {t['groups']} g WHERE g.mode = 'cluster' AND g.position >= %s "
            f"AND NOT EXISTS (SELECT 1 FROM {t['deliveries']} d FORCE INDEX (dc_due) "
            "WHERE d.dc_state IN (0, 1, 2) AND d.group_id = g.id)",
            (messages,),
        )
        names = [str(r[0]) for r in cur.fetchall()]
        cur.execute(f"SELECT name FROM {t['members']} WHERE position >= %s", (messages,))
        return names + [f"fanout:{r[0]}" for r in cur.fetchall()]


def run(settings: Settings, args: argparse.Namespace) -> list[dict[str, Any]]:
    results = []
    for n in range(args.runs):
        prepare(settings)
        publish_s = publish(settings, args.messages, args.batch)
        logs = Path(tempfile.mkdtemp(prefix="duecast-topics-bench-"))
        done = consume(settings, args, logs)
        single = publish_single(settings, args.publishers, args.single_s) if args.publishers else 0.0
        result = {
            "run": n + 1,
            "publish_msgs_per_s": args.messages / publish_s,
            "publish_single_msgs_per_s": single,
            "done_s": done,
            "per_group_msgs_per_s": {g: args.messages / t for g, t in done.items()},
            "all_deliveries_per_s": args.messages * len(done) / max(done.values()),
        }
        results.append(result)
        rates = ", ".join(f"{g} {r:,.0f}/s" for g, r in sorted(result["per_group_msgs_per_s"].items()))
        print(
            f"run {n + 1}: publish {result['publish_msgs_per_s']:,.0f} msgs/s "
            f"(single, {args.publishers} threads: {single:,.0f}/s); consume {rates}; "
            f"all groups {result['all_deliveries_per_s']:,.0f} deliveries/s",
            file=sys.stderr,
        )
    return results


def table(args: argparse.Namespace, results: list[dict[str, Any]]) -> Table:
    title = (
        f"topics: {args.messages:,} messages, {args.groups} cluster group(s)"
        + (f" + a broadcast group of {args.members}" if args.members else "")
        + f", 1 dispatcher + {args.workers} workers"
    )
    t = Table(title=title)
    names = sorted(results[0]["per_group_msgs_per_s"])
    single = [f"single x{args.publishers} msgs/s"] if args.publishers else []
    cols = ["run", "publish msgs/s", *single, *(f"{g} msgs/s" for g in names)]
    for col in (*cols, "all deliveries/s"):
        t.add_column(col, justify="right")

    def row(label: str, r: dict[str, Any]) -> list[str]:
        per = [f"{r['per_group_msgs_per_s'][g]:,.0f}" for g in names]
        one = [f"{r['publish_single_msgs_per_s']:,.0f}"] if args.publishers else []
        return [label, f"{r['publish_msgs_per_s']:,.0f}", *one, *per]

    for r in results:
        t.add_row(*row(str(r["run"]), r), f"{r['all_deliveries_per_s']:,.0f}")
    median = {
        "publish_msgs_per_s": statistics.median(r["publish_msgs_per_s"] for r in results),
        "publish_single_msgs_per_s": statistics.median(r["publish_single_msgs_per_s"] for r in results),
        "per_group_msgs_per_s": {
            g: statistics.median(r["per_group_msgs_per_s"][g] for r in results) for g in names
        },
    }
    t.add_row(*row("median", median), f"{statistics.median(r['all_deliveries_per_s'] for r in results):,.0f}")
    return t


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--messages", type=int, default=100_000)
    p.add_argument("--batch", type=int, default=1000, help="messages per publish_many call")
    p.add_argument("--groups", type=int, default=3, choices=range(1, len(CLUSTER) + 1))
    p.add_argument("--members", type=int, default=0, help="broadcast members (processes) of group fanout")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--concurrency", type=int, default=1, help="handler threads per worker")
    p.add_argument(
        "--publishers", type=int, default=4, help="threads for the single-message publish (0: skip)"
    )
    p.add_argument("--single-s", type=float, default=5.0, help="seconds of single-message publishing")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--timeout", type=float, default=600.0)
    p.add_argument("--json", type=Path)
    args = p.parse_args(argv)
    harness.use_bench_namespace()
    base = load_settings()
    settings = base.model_copy(update={"topics": TopicsSettings.model_validate(topics(args))})
    harness.check_namespace(settings)
    with harness.exclusive(settings):
        results = run(settings, args)
    harness.report_console().print(table(args, results))
    if args.json:
        harness.write_json(args.json, {"args": vars(args), "results": results})
    return 0


if __name__ == "__main__":
    sys.exit(main())
