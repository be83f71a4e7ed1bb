"""Benchmark: enqueue N no-op one-off jobs, then drain them; jobs/s each way (median of --runs).

Enqueue: Enqueuer.enqueue_many, --batch jobs per call (one transaction, one multi-row INSERT per
500 jobs). Drain: one dispatcher and --workers worker processes start after the enqueue, and the
clock stops when the jobs table is empty (every job deleted by its fenced ack). Enqueue -> start
latency under a steady load is bench/latency.py's job.

    scripts/dev shell python bench/jobs.py                         # 100,000 jobs, 2 workers, 3 runs
    scripts/dev shell python bench/jobs.py --jobs 20000 --runs 1 --json /tmp/jobs.json
    scripts/dev shell python bench/jobs.py --limit-rate 10000000   # a limit that never binds
    scripts/dev shell python bench/jobs.py --jobs 50000 --compare-limit 10000000  # its cost, same run

Runs in database duecast_bench / key prefix duecast-bench (see bench/harness.py); it empties that
database's jobs table and the jobs keys of that prefix.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from contextlib import closing
from pathlib import Path
from typing import Any

import harness
import rescan
from rich.table import Table

from duecast.cli.demo.fleet import Fleet, cpu_seconds
from duecast.shared.api.enqueue import Enqueuer, Job
from duecast.shared.fanout.client import connect_redis
from duecast.shared.identifiers import quote
from duecast.shared.settings import JOBS_SOURCE, Settings
from duecast.shared.storage.admin import migrate
from duecast.shared.storage.db import connect

BENCH_DIR = Path(__file__).resolve().parent
APP = "bench_jobs_app"


def prepare(settings: Settings) -> None:
    migrate.apply(settings)
    with closing(connect(settings.mysql)) as conn, conn.cursor() as cur:
        cur.execute(f"TRUNCATE TABLE {quote(settings.jobs.table)}")
    harness.clear_keys(settings, [f"{JOBS_SOURCE}.{q}" for q in settings.jobs.queues])


def enqueue(settings: Settings, jobs: int, batch: int) -> float:
    client = connect_redis(settings.redis)
    enqueuer = Enqueuer(settings, client, tasks=["noop"])
    try:
        started = time.perf_counter()
        for lo in range(0, jobs, batch):
            enqueuer.enqueue_many(Job("noop", {"i": i}) for i in range(lo, min(jobs, lo + batch)))
        return time.perf_counter() - started
    finally:
        enqueuer.db.close()
        client.close()


def drain(
    settings: Settings, args: argparse.Namespace, logs: Path, limit_rate: float | None
) -> tuple[float, dict[str, float]]:
    """Seconds until the jobs table is empty, and each process's CPU seconds."""
    config = logs / "jobs.toml"
    text = f'[worker]\nsources = ["{JOBS_SOURCE}"]\nconcurrency = {args.concurrency}\n'
    if limit_rate:  # a fleet-wide rate limit on every queue (docs/protecting.md): its cost
        text += "".join(f"[jobs.limits.{q}]\nrate_limit_per_s = {limit_rate}\n" for q in settings.jobs.queues)
    config.write_text(text)
    path = os.pathsep.join(p for p in (str(BENCH_DIR), os.environ.get("PYTHONPATH")) if p)
    fleet = Fleet(config, APP, logs, extra_env={"PYTHONPATH": path})
    table = quote(settings.jobs.table)
    with closing(connect(settings.mysql)) as poll:
        poll.autocommit(True)
        started = time.perf_counter()
        fleet.start_dispatcher()
        for i in range(args.workers):
            fleet.start_worker(f"worker-{i + 1}")
        cpu: dict[str, float] = {}
        try:
            with poll.cursor() as cur:
                while True:
                    cur.execute(f"SELECT EXISTS (SELECT 1 FROM {table})")
                    row = cur.fetchone()
                    if row is not None and not row[0]:
                        break
                    if time.perf_counter() - started > args.timeout or not fleet.alive():
                        raise SystemExit(f"drain did not finish in {args.timeout:.0f}s; process logs: {logs}")
                    cpu = fleet.cpu_seconds()
                    time.sleep(0.02)
            return time.perf_counter() - started, cpu
        finally:
            fleet.stop()


def variants(args: argparse.Namespace, n: int) -> list[float | None]:
    """The limits each run drains with: one, or without and with a limit that never binds, in
    alternating order (so a drift of the machine's load falls on both alike)."""
    if not args.compare_limit:
        return [args.limit_rate]
    pair: list[float | None] = [None, args.compare_limit]
    return pair if n % 2 == 0 else pair[::-1]


def run(settings: Settings, args: argparse.Namespace) -> list[dict[str, Any]]:
    harness.compile_bytecode()  # each process's start counts in its CPU per job: as installed
    results = []
    for n in range(args.runs):
        for limit in variants(args, n):
            prepare(settings)
            enqueue_s = enqueue(settings, args.jobs, args.batch)
            logs = Path(tempfile.mkdtemp(prefix="duecast-jobs-bench-"))
            db_pid = rescan.mariadb_pid()
            db_before = cpu_seconds(db_pid) if db_pid else 0.0
            drain_s, cpu = drain(settings, args, logs, limit)
            if db_pid:  # the profile: where a job's CPU goes (MariaDB shares the machine's cores)
                cpu = {"mariadb": cpu_seconds(db_pid) - db_before, **cpu}
            results.append(
                {
                    "run": n + 1,
                    "limit": limit,
                    "enqueue_jobs_per_s": args.jobs / enqueue_s,
                    "drain_jobs_per_s": args.jobs / drain_s,
                    "drain_s": drain_s,
                    "cpu_s": cpu,
                }
            )
            print(
                f"run {n + 1}, limit {limit or 'none'}: enqueue {args.jobs / enqueue_s:,.0f} jobs/s, "
                f"drain {args.jobs / drain_s:,.0f} jobs/s",
                file=sys.stderr,
            )
    return results


def limit_ratio(results: list[dict[str, Any]]) -> float | None:
    """Median over runs of (drain with the limit) / (drain without), each pair from the same run."""
    by_run: dict[int, dict[bool, float]] = {}
    for r in results:
        by_run.setdefault(r["run"], {})[r["limit"] is not None] = r["drain_jobs_per_s"]
    ratios = [pair[True] / pair[False] for pair in by_run.values() if len(pair) == 2]
    return statistics.median(ratios) if ratios else None


def cpu_per_job(cpu_s: dict[str, float], jobs: int) -> str:
    """Microseconds of CPU per drained job, by process kind."""
    kinds = {
        "mariadb": cpu_s.get("mariadb", 0.0),
        "dispatcher": sum(v for k, v in cpu_s.items() if k.startswith("dispatcher")),
        "workers": sum(v for k, v in cpu_s.items() if k.startswith("worker")),
    }
    return " / ".join(f"{v / jobs * 1e6:.0f}" for v in kinds.values())


def table(args: argparse.Namespace, results: list[dict[str, Any]]) -> Table:
    t = Table(title=f"one-off jobs: {args.jobs:,} no-op jobs, 1 dispatcher + {args.workers} workers")
    for col in (
        "run",
        "limit",
        "enqueue jobs/s",
        "drain jobs/s",
        "drain s",
        "drain CPU µs/job: MariaDB / dispatcher / workers",
    ):
        t.add_column(col, justify="right")
    for r in results:
        t.add_row(
            str(r["run"]),
            f"{r['limit']:,.0f}/s" if r["limit"] else "none",
            f"{r['enqueue_jobs_per_s']:,.0f}",
            f"{r['drain_jobs_per_s']:,.0f}",
            f"{r['drain_s']:.2f}",
            cpu_per_job(r["cpu_s"], args.jobs),
        )
    for limit in dict.fromkeys(r["limit"] for r in results):
        mine = [r for r in results if r["limit"] == limit]
        t.add_row(
            "median",
            f"{limit:,.0f}/s" if limit else "none",
            f"{statistics.median(r['enqueue_jobs_per_s'] for r in mine):,.0f}",
            f"{statistics.median(r['drain_jobs_per_s'] for r in mine):,.0f}",
            f"{statistics.median(r['drain_s'] for r in mine):.2f}",
            "",
        )
    if (ratio := limit_ratio(results)) is not None:
        t.add_row("with / without", "", "", f"{ratio:.3f} (median of same-run ratios)", "", "")
    return t


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--jobs", type=int, default=100_000)
    p.add_argument("--batch", type=int, default=10_000, help="jobs per enqueue_many call")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--concurrency", type=int, default=1, help="handler threads per worker")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--timeout", type=float, default=300.0)
    p.add_argument("--limit-rate", type=float, help="rate_limit_per_s on every queue (the cost of a limit)")
    p.add_argument(
        "--compare-limit",
        type=float,
        metavar="RATE",
        help="each run drains twice, without and with this rate_limit_per_s on every queue, and the "
        "table gives the median of the same-run ratios",
    )
    p.add_argument("--json", type=Path)
    args = p.parse_args(argv)
    return harness.run_and_report(args, run, table)


if __name__ == "__main__":
    sys.exit(main())
