"""Benchmark: a worker SIGKILLed holding a full batch; seconds from the kill to the last of its
(healthy) jobs or messages done, for a job queue and for a cluster group (issue 16: minutes before).

Per kind and run: --batch rows are made, a dispatcher and worker A start with the default settings
(lease_s 15 s, pop and claim batches of 2,000); once A has the whole batch RUNNING its handlers
hold, it is SIGKILLed, and worker B starts at once (as a supervisor would). Real time: the leases
run out on their own. The claims and stale entries in the Redis stats show any churn (a job queue's
claims count runs: up to jobs.run_size jobs each). A job's max attempt is its ended runs: 2 (the
interrupted one, and the one that did it).

    scripts/dev shell python bench/interrupted.py                 # 2,000 rows, 3 runs per kind
    scripts/dev shell python bench/interrupted.py --runs 1 --json /tmp/interrupted.json
    scripts/dev shell python bench/interrupted.py --poison        # a job that kills every worker

With --poison there is no kill from outside: one job of the batch (the middle one) SIGKILLs the
worker that runs it, every time, and the worker runs under `duecast worker --supervise`, which hands
back a dead child's jobs at once and starts a new one. Measured from the first death (the poison job
writes the time before it kills its worker): when each healthy batch-mate was done, how many deaths
the poison job caused, and that it ended dead (jobs.max_interruptions, 3). With --unsupervised, a
plain worker and a loop here that starts a new one at each death, as systemd would (the leases and
the leader's look for dead workers bring the jobs back).

Runs in database duecast_bench / key prefix duecast-bench (see bench/harness.py); it empties that
database's jobs table and its interrupted_* topic tables, and their keys.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import sys
import tempfile
import time
from contextlib import closing
from pathlib import Path
from typing import Any

import harness
from rich.table import Table
from topics import toml_fields

from duecast.cli.demo.fleet import Fleet
from duecast.shared.api.enqueue import Enqueuer, Job
from duecast.shared.api.publish import Publish, Publisher
from duecast.shared.fanout.client import connect_redis
from duecast.shared.fanout.keys import Keys
from duecast.shared.identifiers import quote
from duecast.shared.settings import JOBS_SOURCE, Settings, TopicsSettings, load_settings
from duecast.shared.states import State
from duecast.shared.storage.admin import migrate
from duecast.shared.storage.db import connect

BENCH_DIR = Path(__file__).resolve().parent
# The children import the app from bench/ and duecast from what this process's PYTHONPATH puts
# first (an A/B against an archived tree, as in docs/benchmarks.md).
CHILD_PATH = os.pathsep.join(p for p in (str(BENCH_DIR), os.environ.get("PYTHONPATH")) if p)
APP = "interrupted_app"
PREFIX = "interrupted_"
TOPICS = {
    "table_prefix": PREFIX,
    "names": ["interrupted"],
    "groups": [{"topic": "interrupted", "name": "held", "start": "earliest"}],
}
GROUP_SOURCE = "topics.interrupted-held"
KINDS = ("jobs", "group")


def prepare(settings: Settings, kind: str, rows: int) -> tuple[str, str]:
    """Fresh tables and keys, `rows` jobs or messages made; returns (table to watch, source)."""
    with closing(connect(settings.mysql)) as conn, conn.cursor() as cur:
        for name in ("topics", "messages", "groups", "deliveries", "attempts", "members"):
            cur.execute(f"DROP TABLE IF EXISTS `{settings.topics.table(name)}`")
    migrate.apply(settings)
    with closing(connect(settings.mysql)) as conn, conn.cursor() as cur:
        cur.execute(f"TRUNCATE TABLE {quote(settings.jobs.table)}")
        # DELETE, not TRUNCATE: the runs table's ids must stay above RUN_ID_BASE (its AUTO_INCREMENT).
        cur.execute(f"DELETE FROM {quote(settings.jobs.runs_table)}")
        cur.execute(f"DELETE FROM {quote(settings.jobs.cursors_table)}")
        conn.commit()
    harness.clear_keys(settings, [f"{JOBS_SOURCE}.default", GROUP_SOURCE])
    if kind == "jobs":
        enqueuer = Enqueuer(settings, None)
        enqueuer.enqueue_many(Job("hold", i) for i in range(rows))
        enqueuer.db.close()
        return quote(settings.jobs.table), f"{JOBS_SOURCE}.default"
    publisher = Publisher(settings, None)
    publisher.publish_many(Publish("interrupted", {"n": n}) for n in range(rows))
    return f"`{settings.topics.table('deliveries')}`", GROUP_SOURCE


def count(cur: Any, stmt: str) -> int:
    cur.execute(stmt)
    row = cur.fetchone()
    return int(row[0]) if row else 0


def one_run(settings: Settings, kind: str, args: argparse.Namespace) -> dict[str, Any]:
    table, source = prepare(settings, kind, args.batch)
    logs = Path(tempfile.mkdtemp(prefix="duecast-interrupted-bench-"))
    gate = logs / "gate"
    config = logs / "interrupted.toml"
    text = "[jobs]\nretention_s = 3600\n"  # done jobs stay, so the clock sees them finish
    text += f"[topics]\n{toml_fields(TOPICS)}" if kind == "group" else ""
    config.write_text(text)
    extra = {"PYTHONPATH": CHILD_PATH, "DUECAST_BENCH_GATE": str(gate)}
    fleet = Fleet(config, APP, logs, extra_env=extra)
    sources = ("--source", JOBS_SOURCE if kind == "jobs" else source)
    # A job runs as a member of a run (docs/architecture.md, "Job runs"): the batch is running when
    # its runs are; a message's delivery row is its own.
    runs = quote(settings.jobs.runs_table)
    running = (
        f"SELECT COALESCE(SUM(jobs), 0) FROM {runs} WHERE dc_state = {int(State.RUNNING)}"
        if kind == "jobs"
        else f"SELECT COUNT(*) FROM {table} WHERE dc_state = {int(State.RUNNING)}"
    )
    unfinished = f"SELECT COUNT(*) FROM {table} WHERE dc_state <> {int(State.DONE)}"
    with closing(connect(settings.mysql)) as poll:
        poll.autocommit(True)
        try:
            fleet.start_dispatcher()
            fleet.start_worker("worker-a", *sources)
            with poll.cursor() as cur:
                deadline = time.monotonic() + args.timeout
                while count(cur, running) < args.batch:
                    if time.monotonic() > deadline or not fleet.alive():
                        raise SystemExit(f"worker A never held the whole batch; process logs: {logs}")
                    time.sleep(0.05)
                fleet.signal("worker-a", signal.SIGKILL)
                killed = time.monotonic()
                gate.touch()
                fleet.start_worker("worker-b", *sources)
                while count(cur, unfinished):
                    if time.monotonic() - killed > args.timeout:
                        raise SystemExit(f"not done {args.timeout:.0f}s after the kill; process logs: {logs}")
                    time.sleep(0.05)
                took_s = time.monotonic() - killed
                attempts = count(cur, f"SELECT MAX(dc_attempt) FROM {table}")
        finally:
            fleet.stop()
    client = connect_redis(settings.redis)
    stats = {
        k.decode(): int(v) for k, v in client.hgetall(Keys(settings.redis.key_prefix).stats(source)).items()
    }
    client.close()
    return {
        "kind": kind,
        "kill_to_done_s": took_s,
        "max_attempt": attempts,
        "claimed": stats.get("claimed", 0),
        "stale_entries": stats.get("stale_entries", 0),
    }


def poison_run(settings: Settings, args: argparse.Namespace) -> dict[str, Any]:
    """A batch of --batch jobs, its middle one poison; real time, default settings."""
    table, _ = prepare(settings, "jobs", 0)
    enqueuer = Enqueuer(settings, None)
    half = args.batch // 2
    enqueuer.enqueue_many(Job("quick", i) for i in range(half))
    poison = enqueuer.enqueue("die", "poison")
    enqueuer.enqueue_many(Job("quick", i) for i in range(half, args.batch - 1))
    enqueuer.db.close()
    logs = Path(tempfile.mkdtemp(prefix="duecast-poison-bench-"))
    config = logs / "poison.toml"
    config.write_text("[jobs]\nretention_s = 3600\n")  # done jobs stay, with their finish time
    extra = {"PYTHONPATH": CHILD_PATH, "DUECAST_BENCH_DEATHS": str(logs / "deaths")}
    fleet = Fleet(config, APP, logs, extra_env=extra)
    with closing(connect(settings.mysql)) as poll:
        poll.autocommit(True)
        try:
            with poll.cursor() as cur:
                if args.unsupervised:
                    deaths = restart_loop(fleet, cur, table, args.timeout, logs)
                else:
                    fleet.start_dispatcher()
                    fleet.start_worker("worker", "--supervise", "--source", JOBS_SOURCE)
                    wait_done(fleet, cur, table, args.timeout, logs)
                    deaths = [float(t) for t in (logs / "deaths").read_text().split()]
                cur.execute(
                    f"SELECT UNIX_TIMESTAMP(finished_at) FROM {table} WHERE task = 'quick' AND dc_state = %s",
                    (int(State.DONE),),
                )
                done = sorted(float(r[0]) - deaths[0] for r in cur.fetchall()) if deaths else []
                cur.execute(f"SELECT dc_state, interruptions FROM {table} WHERE id = %s", (poison,))
                state, interruptions = cur.fetchone() or (None, None)
        finally:
            fleet.stop()
    return {
        "kind": "poison",
        "supervised": not args.unsupervised,
        "deaths": len(deaths),
        "poison_dead": state == int(State.DEAD),
        "poison_interruptions": interruptions,
        "healthy": len(done),
        "healthy_done_p50_s": statistics.median(done) if done else None,
        "healthy_done_max_s": max(done, default=None),
        "healthy_after_30s": sum(1 for t in done if t > 30.0),
    }


def left_to_run(table: str) -> str:
    return f"SELECT COUNT(*) FROM {table} WHERE dc_state NOT IN ({int(State.DONE)}, {int(State.DEAD)})"


def wait_done(fleet: Fleet, cur: Any, table: str, timeout_s: float, logs: Path) -> None:
    """Wait until no job is left to run; the supervised worker must not exit meanwhile."""
    deadline = time.monotonic() + timeout_s
    while count(cur, left_to_run(table)):
        if time.monotonic() > deadline or "worker" not in fleet.alive():
            raise SystemExit(
                f"not done within {timeout_s:.0f}s, or the supervisor exited; process logs: {logs}"
            )
        time.sleep(0.05)


def restart_loop(fleet: Fleet, cur: Any, table: str, timeout_s: float, logs: Path) -> list[float]:
    """--unsupervised: run a dispatcher and a plain worker, starting a new worker whenever the last
    one dies (as systemd or Kubernetes would), until no job is left to run; returns the deaths'
    times, as the poison job wrote them."""
    fleet.start_dispatcher()
    restarts, worker = 0, "worker-0"
    fleet.start_worker(worker, "--source", JOBS_SOURCE)
    left = left_to_run(table)
    deadline = time.monotonic() + timeout_s
    while count(cur, left):
        if time.monotonic() > deadline:
            raise SystemExit(f"not done within {timeout_s:.0f}s; process logs: {logs}")
        if worker not in fleet.alive():
            restarts += 1
            worker = f"worker-{restarts}"
            fleet.start_worker(worker, "--source", JOBS_SOURCE)
        time.sleep(0.05)
    return [float(t) for t in (logs / "deaths").read_text().split()]


def table(args: argparse.Namespace, results: list[dict[str, Any]]) -> Table:
    t = Table(title=f"a worker SIGKILLed holding {args.batch:,} rows; lease_s 15 s, default batches")
    for col in ("kind", "run", "kill -> last done s", "max attempt", "claimed", "stale entries"):
        t.add_column(col, justify="right")
    for kind in KINDS:
        runs = [r for r in results if r["kind"] == kind]
        for n, r in enumerate(runs, 1):
            row = (r["max_attempt"], r["claimed"], r["stale_entries"])
            t.add_row(kind, str(n), f"{r['kill_to_done_s']:.1f}", *(f"{v:,}" for v in row))
        if runs:
            median = statistics.median(r["kill_to_done_s"] for r in runs)
            t.add_row(kind, "median", f"{median:.1f}", "", "", "")
    return t


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--batch", type=int, default=2000, help="rows the killed worker holds (one batch)")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--timeout", type=float, default=300.0)
    p.add_argument("--poison", action="store_true", help="a poison job in the batch, no kill from outside")
    p.add_argument(
        "--unsupervised", action="store_true", help="--poison without `--supervise` (restarts from here)"
    )
    p.add_argument("--json", type=Path)
    args = p.parse_args(argv)
    harness.use_bench_namespace()
    base = load_settings()
    settings = base.model_copy(update={"topics": TopicsSettings.model_validate(TOPICS)})
    harness.check_namespace(settings)
    results = []
    with harness.exclusive(settings):
        for kind in ("poison",) if args.poison else KINDS:
            for _ in range(args.runs):
                if kind == "poison":
                    results.append(poison_run(settings, args))
                    print(results[-1], file=sys.stderr)
                    continue
                results.append(one_run(settings, kind, args))
                print(f"{kind}: done {results[-1]['kill_to_done_s']:.1f}s after the kill", file=sys.stderr)
    if not args.poison:
        harness.report_console().print(table(args, results))
    if args.json:
        harness.write_json(args.json, {"args": vars(args), "results": results})
    return 0


if __name__ == "__main__":
    sys.exit(main())
