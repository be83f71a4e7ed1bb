"""Benchmark: enqueue -> start latency of one-off jobs at a steady rate (target: p99 <= 50 ms at 1,000/s).

Starts one dispatcher and --workers worker processes (handler module bench/latency_app.py), then
enqueues "stamp" jobs into duecast_jobs at --rate jobs/s for --seconds, and reads when each started.

- Load: open loop. Job i is due at start + i / rate; a producer that falls behind sends at once
  (it never skips), and both its achieved rate and how far behind it fell are reported. A result
  meets the target only if the producer kept within 5% of the asked rate.
- Batching: by default (`--batch-ms 10`) a producer sends every job due so far in one
  enqueue_many (one INSERT, one COMMIT, one wake-up) every 10 ms: 10 jobs per transaction at
  1,000 jobs/s. `--batch-ms 0` makes each job its own enqueue, as a web request enqueueing one job
  would; one connection then needs a COMMIT (a redo-log flush) per job, which a busy 2-core
  machine cannot do 1,000 times a second, so use `--producers N` threads (own connections) to
  reach the rate, at the cost of their CPU on the same machine.
- Enqueue time: time.time() just after COMMIT returns (before the wake-up), recorded by the
  producer: from then on the job exists, and that is when a caller's enqueue() could return.
  The payload carries t_sent, time.time() just before the INSERT; "p99 from call" is measured from
  there and includes the enqueue call itself.
- Start time: time.time() when the handler starts (bench/latency_app.py writes one line per run).

    scripts/dev shell python bench/latency.py                      # 1,000 jobs/s for 20 s
    scripts/dev shell python bench/latency.py --rates 100 1000 2000 --chart latency.png

Runs in database duecast_bench / key prefix duecast-bench (see bench/harness.py); it empties that
database's jobs table and the jobs keys of that prefix.
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import harness
import rescan
from latency_app import STAMP_FILE_ENV
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from duecast import Enqueuer, Job
from duecast.admin import migrate
from duecast.demo.fleet import Fleet
from duecast.shared.fanout.queue import connect_redis
from duecast.shared.identifiers import quote
from duecast.shared.settings import JOBS_SOURCE, Settings, load_settings
from duecast.shared.storage.db import connect

BENCH_DIR = Path(__file__).resolve().parent
APP = "latency_app"
TASK = "stamp"
POLL_S = 0.05
RATE_TOLERANCE = 0.95  # a phase counts only if the producer kept within 5% of the asked rate


@dataclass
class Stamps:
    """Reads the stamp file as it grows: job i -> (t_sent, t_start) of its first run."""

    path: Path
    offset: int = 0
    runs: dict[int, tuple[float, float]] = field(default_factory=dict)
    duplicates: int = 0
    pids: Counter[int] = field(default_factory=Counter)

    def poll(self) -> None:
        if not self.path.exists():
            return
        with self.path.open("rb") as f:
            f.seek(self.offset)
            data = f.read()
        done = data.rfind(b"\n") + 1  # a line still being written waits for the next poll
        self.offset += done
        for line in data[:done].splitlines():
            i, sent, start, pid = line.split()
            if int(i) in self.runs:
                self.duplicates += 1  # at-least-once: only the first run counts for latency
                continue
            self.runs[int(i)] = (float(sent), float(start))
            self.pids[int(pid)] += 1

    def wait_for(self, ids: range, timeout_s: float) -> int:
        """Poll until every id in `ids` started or `timeout_s` passed; returns how many are missing."""
        deadline = time.monotonic() + timeout_s
        while True:
            self.poll()
            missing = sum(1 for i in ids if i not in self.runs)
            if missing == 0 or time.monotonic() >= deadline:
                return missing
            time.sleep(POLL_S)


@dataclass
class Load:
    """How one phase of enqueueing went: commit time per job, and how far behind schedule it fell."""

    rate: float
    ids: range
    committed: dict[int, float] = field(default_factory=dict)  # job i -> time.time() after COMMIT
    max_lag_s: float = 0.0


def produce(settings: Settings, load: Load, offsets: list[int], batch_s: float, start: float) -> None:
    """Enqueue the jobs at `offsets` (0-based within the phase) on their schedule from `start`
    (time.monotonic()); one thread, one connection."""
    conn = connect(settings.mysql)
    client = connect_redis(settings.redis)
    enqueuer = Enqueuer(settings, client, tasks=[TASK])
    first = load.ids.start
    k = 0
    try:
        while k < len(offsets):
            due = start + offsets[k] / load.rate
            if batch_s:  # the next batch tick at or after the job's due time
                due = start + math.ceil(offsets[k] / load.rate / batch_s) * batch_s
            time.sleep(max(0.0, due - time.monotonic()))
            now = time.monotonic()
            load.max_lag_s = max(load.max_lag_s, now - due)
            n = 1
            if batch_s:  # everything due by now, in one transaction
                while k + n < len(offsets) and start + offsets[k + n] / load.rate <= now:
                    n += 1
            sent = time.time()
            jobs = [Job(TASK, {"i": first + o, "t_sent": sent}) for o in offsets[k : k + n]]
            enqueuer.enqueue_many(jobs, conn=conn)
            conn.commit()
            committed = time.time()
            enqueuer.wake()
            for o in offsets[k : k + n]:
                load.committed[first + o] = committed
            k += n
    finally:
        conn.close()
        client.close()


def run_load(settings: Settings, args: argparse.Namespace, rate: float, first: int, console: Console) -> Load:
    count = max(1, round(rate * args.seconds))
    total = Load(rate, range(first, first + count))
    parts = [Load(rate, total.ids) for _ in range(args.producers)]
    start = time.monotonic() + 0.5  # one schedule for every producer, once they have connected
    threads = [
        threading.Thread(
            target=produce,
            args=(settings, part, list(range(p, count, args.producers)), args.batch_ms / 1000, start),
            name=f"producer-{p}",
            daemon=True,
        )
        for p, part in enumerate(parts)
    ]
    with Progress(console=console, transient=True) as bar:
        task = bar.add_task(f"enqueueing at {rate:,.0f} jobs/s", total=count)
        for t in threads:
            t.start()
        while any(t.is_alive() for t in threads):
            bar.update(task, completed=sum(len(p.committed) for p in parts))
            time.sleep(0.25)
    for part in parts:
        total.committed.update(part.committed)
        total.max_lag_s = max(total.max_lag_s, part.max_lag_s)
    if len(total.committed) != count:
        raise SystemExit(f"a producer failed: {len(total.committed)} of {count} jobs enqueued")
    return total


def summarise(load: Load, stamps: Stamps, missing: int, target_ms: float) -> dict[str, Any]:
    done = [i for i in load.ids if i in stamps.runs]
    lat = sorted((stamps.runs[i][1] - load.committed[i]) * 1000 for i in done)
    from_call = sorted((stamps.runs[i][1] - stamps.runs[i][0]) * 1000 for i in done)
    begin = min(load.committed.values())
    per_second: dict[int, list[float]] = {}
    for i in done:
        second = int(load.committed[i] - begin)
        per_second.setdefault(second, []).append((stamps.runs[i][1] - load.committed[i]) * 1000)
    timeline = [
        {"second": s, "p50_ms": harness.quantile(sorted(v), 0.5), "p99_ms": harness.quantile(sorted(v), 0.99)}
        for s, v in sorted(per_second.items())
    ]
    p99 = harness.quantile(lat, 0.99)
    # From the first COMMIT to the last: thread start-up and the final poll do not count.
    span_s = max(load.committed.values()) - begin
    enqueue_per_s = (len(load.ids) - 1) / span_s if span_s > 0 else math.nan
    rate_reached = enqueue_per_s >= RATE_TOLERANCE * load.rate or len(load.ids) < 2
    return {
        "rate": load.rate,
        "enqueued": len(load.ids),
        "enqueue_per_s": enqueue_per_s,
        "max_producer_lag_ms": load.max_lag_s * 1000,
        "started": len(done),
        "missing": missing,
        "latency_ms": {
            "min": lat[0] if lat else math.nan,
            "p50": harness.quantile(lat, 0.50),
            "p90": harness.quantile(lat, 0.90),
            "p99": p99,
            "p999": harness.quantile(lat, 0.999),
            "max": lat[-1] if lat else math.nan,
            "mean": statistics.fmean(lat) if lat else math.nan,
        },
        "from_call_p99_ms": harness.quantile(from_call, 0.99),
        "rate_reached": rate_reached,
        "meets_target": bool(lat) and missing == 0 and rate_reached and p99 <= target_ms,
        "timeline": timeline,
        "cdf_ms": lat[:: max(1, len(lat) // 2000)],  # at most ~2,000 points for the chart
    }


def prepare(settings: Settings) -> None:
    """The jobs table migrated and empty, the jobs keys of this prefix gone."""
    migrate.apply(settings)
    conn = connect(settings.mysql)
    try:
        with conn.cursor() as cur:
            cur.execute(f"TRUNCATE TABLE {quote(settings.jobs.table)}")
    finally:
        conn.close()
    harness.clear_keys(settings, [f"{JOBS_SOURCE}.default"])


def start_fleet(args: argparse.Namespace, logs: Path, stamp_file: Path) -> Fleet:
    config = logs / "latency.toml"
    config.write_text(f'[worker]\nsources = ["{JOBS_SOURCE}"]\nconcurrency = {args.concurrency}\n')
    path = os.pathsep.join(p for p in (str(BENCH_DIR), os.environ.get("PYTHONPATH", "")) if p)
    fleet = Fleet(config, APP, logs, extra_env={"PYTHONPATH": path, STAMP_FILE_ENV: str(stamp_file)})
    fleet.start_dispatcher()
    for i in range(args.workers):
        fleet.start_worker(f"worker-{i + 1}")
    return fleet


def warm_up(settings: Settings, stamps: Stamps, fleet: Fleet, logs: Path) -> None:
    """A few jobs through the whole path, so the measured phases start with every process ready."""
    client = connect_redis(settings.redis)
    enqueuer = Enqueuer(settings, client, tasks=[TASK])
    try:
        enqueuer.enqueue_many(Job(TASK, {"i": i, "t_sent": time.time()}) for i in range(-20, 0))
    finally:
        enqueuer.db.close()
        client.close()
    if stamps.wait_for(range(-20, 0), 60.0) or not fleet.alive():
        raise SystemExit(f"warm-up jobs did not run within 60 s; process logs: {logs}")


def run_all(settings: Settings, args: argparse.Namespace, console: Console) -> dict[str, Any]:
    logs = Path(tempfile.mkdtemp(prefix="duecast-latency-"))
    stamps = Stamps(logs / "stamps.txt")
    fleet = start_fleet(args, logs, stamps.path)
    results = []
    ok = False
    try:
        warm_up(settings, stamps, fleet, logs)
        first = 0
        for rate in args.rates:
            console.rule(f"{rate:,.0f} jobs/s for {args.seconds:g} s")
            load = run_load(settings, args, rate, first, console)
            missing = stamps.wait_for(load.ids, args.drain_timeout)
            results.append(summarise(load, stamps, missing, args.target_ms))
            r = results[-1]["latency_ms"]
            console.print(f"p50 {r['p50']:.1f} ms, p99 {r['p99']:.1f} ms, missing {missing}")
            first = load.ids.stop
            time.sleep(args.pause)
        ok = True
    finally:
        codes = fleet.stop()
        if ok and not any(codes.values()):
            shutil.rmtree(logs, ignore_errors=True)
        else:
            console.print(f"process exit codes {codes}; logs kept in {logs}")
    return {"results": results, "duplicates": stamps.duplicates, "runs_per_worker_pid": dict(stamps.pids)}


def table(args: argparse.Namespace, results: list[dict[str, Any]]) -> Table:
    how = (
        f"enqueue_many every {args.batch_ms:g} ms"
        if args.batch_ms
        else "one enqueue (INSERT, COMMIT, wake-up) per job"
    )
    t = Table(
        title=f"enqueue -> start latency: {args.workers} worker(s), {args.seconds:g} s per rate, {how}, "
        f"{args.producers} producer thread(s); from COMMIT returned to handler start"
    )
    for col in (
        "rate",
        "enqueued/s",
        "max lag",
        "started",
        "p50",
        "p90",
        "p99",
        "p99.9",
        "max",
        "p99 from call",
        f"p99 ≤ {args.target_ms:g} ms",
    ):
        t.add_column(col, justify="right")
    for r in results:
        lat = r["latency_ms"]
        started = f"{r['started']:,}" + (f" ({r['missing']:,} missing)" if r["missing"] else "")
        t.add_row(
            f"{r['rate']:,.0f}/s",
            f"{r['enqueue_per_s']:,.0f}",
            f"{r['max_producer_lag_ms']:,.0f} ms",
            started,
            *(f"{lat[k]:.1f} ms" for k in ("p50", "p90", "p99", "p999", "max")),
            f"{r['from_call_p99_ms']:.1f} ms",
            "yes" if r["meets_target"] else "NO" if r["rate_reached"] else "NO (rate not reached)",
        )
    return t


def chart(plt: Any, args: argparse.Namespace, results: list[dict[str, Any]], machine: str) -> None:
    fig, (cdf, timeline) = plt.subplots(1, 2, figsize=(13, 5))
    for r in results:
        lat = r["cdf_ms"]
        label = f"{r['rate']:,.0f} jobs/s"
        (line,) = cdf.plot(lat, [(k + 1) / len(lat) for k in range(len(lat))], label=label)
        color = line.get_color()
        seconds = [x["second"] for x in r["timeline"]]
        timeline.plot(seconds, [x["p99_ms"] for x in r["timeline"]], color=color, label=f"{label} p99")
        timeline.plot(seconds, [x["p50_ms"] for x in r["timeline"]], ":", color=color, label=f"{label} p50")
    cdf.set_xscale("log")
    cdf.set_xlabel("enqueue -> start (ms, log scale)")
    cdf.set_ylabel("share of jobs")
    cdf.set_title("latency CDF")
    for ax in (cdf, timeline):
        ax.grid(alpha=0.3)
    cdf.axvline(args.target_ms, color="red", linestyle="--", linewidth=1)
    timeline.axhline(args.target_ms, color="red", linestyle="--", linewidth=1, label="target")
    timeline.set_xlabel("second of the run (by enqueue time)")
    timeline.set_ylabel("ms")
    timeline.set_title("latency per second of enqueueing")
    cdf.legend()
    timeline.legend(fontsize=8)
    fig.suptitle(f"duecast enqueue -> start, {args.workers} worker(s)\n{machine}", fontsize=10)
    harness.save_chart(plt, fig, args.chart)


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rate", type=float, default=1000.0, help="jobs/s (default 1000)")
    parser.add_argument("--rates", type=float, nargs="+", help="several rates, one after the other")
    parser.add_argument("--seconds", type=float, default=20.0, help="enqueueing time per rate")
    parser.add_argument("--workers", type=int, default=2, help="worker processes")
    parser.add_argument("--concurrency", type=int, default=1, help="handler threads per worker")
    parser.add_argument("--producers", type=int, default=1, help="enqueueing threads (own connections)")
    parser.add_argument(
        "--batch-ms",
        type=float,
        default=10.0,
        help="enqueue_many of the jobs due so far every N ms (default 10); 0: one enqueue per job",
    )
    parser.add_argument("--drain-timeout", type=float, default=30.0, help="wait this long for stragglers")
    parser.add_argument("--pause", type=float, default=2.0, help="idle seconds between rates")
    parser.add_argument("--target-ms", type=float, default=50.0, help="the p99 target")
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.add_argument("--chart", type=Path, help="also draw a PNG here (needs matplotlib)")
    args = parser.parse_args(argv)
    args.rates = args.rates or [args.rate]
    if min(args.rates) <= 0 or args.seconds <= 0 or args.workers < 1 or args.producers < 1:
        parser.error("rates and --seconds must be > 0, --workers and --producers >= 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    harness.use_bench_namespace()
    settings = load_settings().model_copy(update={"sources": []})
    harness.check_namespace(settings)
    if not settings.jobs.enabled:
        raise SystemExit("the jobs source is disabled (jobs.enabled = false); this benchmark needs it")
    plt = harness.chart_backend(args.chart)
    console = Console(stderr=True)
    with harness.exclusive(settings):
        prepare(settings)
        outcome = run_all(settings, args, console)
        prepare(settings)  # leave no jobs or entries behind
    out = harness.report_console()
    out.print(table(args, outcome["results"]))
    if outcome["duplicates"]:
        out.print(f"{outcome['duplicates']} job(s) ran more than once (at-least-once redeliveries)")
    machine = rescan.versions_line(settings)
    out.print(machine)
    if args.json:
        harness.write_json(args.json, {"args": vars(args), "machine": machine, **outcome})
    if plt is not None:
        chart(plt, args, outcome["results"], machine)
    return 0 if all(r["missing"] == 0 for r in outcome["results"]) else 1


if __name__ == "__main__":
    sys.exit(main())
