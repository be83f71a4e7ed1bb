"""Benchmark: a cold drain's start-up. How long after its processes are spawned does a fleet claim,
start and finish its first job?

N no-op jobs are enqueued first; then one dispatcher and --workers worker processes (or, with
--processes N, one `duecast worker --processes N`, its workers forked from it) are spawned and
the clock starts (where bench/peers/run.py's drain clock starts). Every --poll-ms the jobs table is
read: *claimed* is when the claims' cursor first moved (the dispatcher's first claim committed),
*started* when the first job's row left `idle` (a worker's start committed), *done* when the
backlog MAX(id) - MIN(id) + 1 first fell below N (a worker's fenced ack deleted a row): the peers'
"first job done", polled every 5 ms instead of 50. Each process' first log line after its start-up
("dispatching ..." / "working on ...") says when its imports, settings and start-up checks were
done. *fleet CPU* is the CPU seconds the three processes had used when the first job was seen done:
on a busy machine the times stretch, that much less. (Redis' counters would be late: workers send
theirs every 0.5 s.)

    scripts/dev shell python bench/cold_start.py                  # 100,000 jobs, 2 workers, 3 runs
    scripts/dev shell python bench/cold_start.py --jobs 2000 --runs 1
    scripts/dev shell python bench/cold_start.py --processes 2    # one parent forks the 2 workers
    scripts/dev shell python bench/cold_start.py --from-source    # no bytecode: each process compiles duecast

Runs in database duecast_bench / key prefix duecast-bench (bench/harness.py); it empties that
database's jobs table, its claim cursors and runs, and the jobs keys of that prefix.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from contextlib import closing
from datetime import datetime
from pathlib import Path
from typing import Any

import harness
import jobs
from rich.table import Table

from duecast.cli.demo.fleet import Fleet
from duecast.shared.identifiers import quote
from duecast.shared.settings import Settings
from duecast.shared.states import State
from duecast.shared.storage.db import connect

READY = {"dispatcher": "dispatching ", "worker": "working on "}  # each role's first line once started


def drain_start(settings: Settings, args: argparse.Namespace, logs: Path) -> dict[str, float | None]:
    """Spawn the fleet and poll the jobs table until a job is done; seconds from the spawn to each event."""
    config = logs / "cold.toml"
    config.write_text("# every setting at its default, as in bench/peers/duecast_peer.py\n")
    path = os.pathsep.join(p for p in (str(jobs.BENCH_DIR), os.environ.get("PYTHONPATH")) if p)
    fleet = Fleet(config, jobs.APP, logs, extra_env={"PYTHONPATH": path})
    t, c = quote(settings.jobs.table), quote(settings.jobs.cursors_table)
    # Primary-key lookups: the backlog's ends (bench/peers/harness.py's mysql_backlog), the state of
    # the first job (claims take the lowest ids first: ORDER BY priority, run_at, id) and how far
    # the claims' cursors moved (10 rows).
    poll_sql = (
        f"SELECT MIN(id), MAX(id), (SELECT dc_state FROM {t} ORDER BY id LIMIT 1), "
        f"(SELECT MAX(id) FROM {c}) FROM {t}"
    )
    out: dict[str, float | None] = {"claimed": None, "started": None, "done": None}
    with closing(connect(settings.mysql)) as poll, poll.cursor() as cur:
        poll.autocommit(True)
        wall = time.time()
        started = time.perf_counter()
        try:
            fleet.start_dispatcher()
            if args.processes:  # one parent, its workers forked from it once it has imported
                fleet.start_worker("worker-forked", "--processes", str(args.processes))
            for i in range(0 if args.processes else args.workers):
                fleet.start_worker(f"worker-{i + 1}")
            while out["done"] is None:
                cur.execute(poll_sql)
                lo, hi, state, cursor = cur.fetchone()
                now = time.perf_counter() - started
                if lo is None or int(hi) - int(lo) + 1 < args.jobs:
                    out["done"] = now
                    # What the fleet burnt to get there: robust to a busy machine, unlike the times.
                    out["fleet CPU"] = sum(fleet.cpu_seconds().values())
                if out["started"] is None and (out["done"] or state != int(State.IDLE)):
                    out["started"] = now
                if out["claimed"] is None and (out["started"] or cursor):
                    out["claimed"] = now
                if now > args.timeout or not fleet.alive():
                    raise SystemExit(f"no job done in {args.timeout:.0f}s; process logs: {logs}")
                time.sleep(args.poll_ms / 1000)
        finally:
            fleet.stop()
    for name in fleet.procs:
        out[f"{name} ready"] = ready_s(logs / f"{name}.log", READY[name.split("-")[0]], wall)
    return out


def ready_s(log: Path, marker: str, wall: float) -> float | None:
    """Seconds from `wall` (the spawn) to the log line carrying `marker` (its timestamp, ms)."""
    for line in log.read_text(errors="replace").splitlines():
        if marker in line:
            stamp = datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f")
            return stamp.timestamp() - wall
    return None


def prepare(settings: Settings) -> None:
    """bench/jobs.py's preparation, and no claim cursor or run left from a drain cut short: each
    run starts as the first one in a new database."""
    jobs.prepare(settings)
    with closing(connect(settings.mysql)) as conn, conn.cursor() as cur:
        cur.execute(f"TRUNCATE TABLE {quote(settings.jobs.cursors_table)}")
        cur.execute(f"DELETE FROM {quote(settings.jobs.runs_table)}")  # keeps its AUTO_INCREMENT
        conn.commit()


def run(settings: Settings, args: argparse.Namespace) -> list[dict[str, Any]]:
    if args.from_source:
        harness.remove_bytecode()  # each process compiles duecast, as a checkout here does
    else:
        harness.compile_bytecode()  # as an installed duecast: pip writes the bytecode
    results = []
    for n in range(args.runs):
        prepare(settings)
        jobs.enqueue(settings, args.jobs, args.batch)
        logs = Path(tempfile.mkdtemp(prefix="duecast-cold-bench-"))
        times = drain_start(settings, args, logs)
        results.append({"run": n + 1, "seconds": times, "logs": str(logs)})
        print(f"run {n + 1}: " + ", ".join(f"{k} {_s(v)}" for k, v in times.items()), file=sys.stderr)
    return results


def _s(v: float | None) -> str:
    return "-" if v is None else f"{v:.3f}"


def table(args: argparse.Namespace, results: list[dict[str, Any]]) -> Table:
    how = "compiled from source in each process" if args.from_source else "bytecode compiled first"
    fleet = f"worker --processes {args.processes}" if args.processes else f"{args.workers} workers spawned"
    t = Table(title=f"cold start: {args.jobs:,} jobs waiting, 1 dispatcher + {fleet}; duecast {how}")
    events = list(results[0]["seconds"])
    t.add_column("run", justify="right")
    for event in events:
        t.add_column(f"{'first job ' if ' ' not in event else ''}{event} (s)", justify="right")
    for r in results:
        t.add_row(str(r["run"]), *(_s(r["seconds"][e]) for e in events))
    medians = []
    for e in events:
        values = [r["seconds"][e] for r in results if r["seconds"][e] is not None]
        medians.append(_s(statistics.median(values)) if values else "-")
    t.add_row("median", *medians)
    return t


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--jobs", type=int, default=100_000, help="jobs waiting when the fleet starts")
    p.add_argument("--batch", type=int, default=10_000, help="jobs per enqueue_many call")
    p.add_argument("--workers", type=int, default=2, help="worker processes, each spawned")
    p.add_argument(
        "--processes",
        type=int,
        help="instead of --workers: one `duecast worker --processes N`, its N workers forked from it",
    )
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--poll-ms", type=float, default=5.0, help="how often the counters are read")
    p.add_argument("--timeout", type=float, default=60.0)
    p.add_argument(
        "--from-source",
        action="store_true",
        help="delete duecast's bytecode first: with PYTHONDONTWRITEBYTECODE=1 each process compiles it",
    )
    p.add_argument("--json", type=Path)
    args = p.parse_args(argv)
    return harness.run_and_report(args, run, table)


if __name__ == "__main__":
    sys.exit(main())
