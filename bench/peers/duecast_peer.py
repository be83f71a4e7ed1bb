"""duecast on the peer workload: INSERT N jobs into duecast_jobs, drain with 1 dispatcher and
`duecast worker --processes W` (W workers forked from one parent, as Dramatiq's `--processes W`).

Runs from duecast's own .venv with the DUECAST_* environment the runner sets (database
duecast_bench_peers, key prefix duecast-bench-peers). Variants: `plain` (every setting at its
default; the I/O workload's task is `async def`) and `threads` (the I/O workload as a plain function
on worker.concurrency = 256 threads, what a user without async would write).
"""

from __future__ import annotations

import compileall
import sys
import time
from contextlib import closing
from pathlib import Path

from harness import (
    Drain,
    Options,
    Workers,
    child_env,
    elapsed,
    emit,
    exact_backlog,
    mysql_backlog,
    parse_args,
    time_drain,
)

import duecast
from duecast.shared.identifiers import quote
from duecast.shared.process.runtime import build_queue
from duecast.shared.settings import JOBS_SOURCE, Settings, load_settings
from duecast.shared.storage.admin import migrate
from duecast.shared.storage.db import connect

try:  # duecast's enqueue API (shared/api/enqueue.py); trees without it get the plain INSERT it wraps
    from duecast.shared.api.enqueue import Enqueuer, Job
except ImportError:
    Enqueuer = None

ENQUEUE_BATCH = 10_000  # rows per INSERT, one transaction each (the seeds' batch enqueue)
THREADS = 256  # the threads variant's worker.concurrency: the most duecast allows
# (workload, variant) -> the task of duecast_app.py its jobs run
TASKS = {("noop", "plain"): "noop", ("io", "plain"): "wait", ("io", "threads"): "wait_sync"}


def enqueue(settings: Settings, task: str, jobs: int) -> tuple[float, str]:
    """Seconds to enqueue `jobs` jobs of `task`, ENQUEUE_BATCH per transaction, and how it was done.

    With duecast's enqueue API (shared/api/enqueue.py) when this tree has it, else the plain multi-row
    INSERT (task, payload '{}', run_at NOW(6)) that API replaces.
    """
    with closing(connect(settings.mysql)) as conn, conn.cursor() as cur:
        cur.execute(f"TRUNCATE TABLE {quote(settings.jobs.table)}")
    if Enqueuer is None:
        return enqueue_sql(
            settings, task, jobs
        ), f"INSERT of {ENQUEUE_BATCH:,} rows per statement and transaction"
    enqueuer = Enqueuer(settings, build_queue(settings).client)
    started = time.monotonic()
    for lo in range(0, jobs, ENQUEUE_BATCH):
        enqueuer.enqueue_many(Job(task, {}) for _ in range(min(ENQUEUE_BATCH, jobs - lo)))
    how = f"duecast Enqueuer.enqueue_many, {ENQUEUE_BATCH:,} jobs per call (one transaction each)"
    return elapsed(started), how


def enqueue_sql(settings: Settings, task: str, jobs: int) -> float:
    table = quote(settings.jobs.table)
    with closing(connect(settings.mysql)) as conn:
        started = time.monotonic()
        for lo in range(0, jobs, ENQUEUE_BATCH):
            n = min(ENQUEUE_BATCH, jobs - lo)
            values = ",".join(["(%s, %s, NOW(6))"] * n)
            with conn.cursor() as cur:
                cur.execute(f"INSERT INTO {table} (task, payload, run_at) VALUES {values}", [task, "{}"] * n)
            conn.commit()
        return elapsed(started)


def write_config(path: Path, variant: str) -> None:
    """The settings file: every duecast setting at its default (the connection comes from env), but
    for the threads variant's worker.concurrency."""
    text = "# peer benchmark: duecast defaults; connection settings come from DUECAST_* env\n"
    if variant == "threads":
        text += f"[worker]\nconcurrency = {THREADS}\n"
    path.write_text(text)


def compile_bytecode() -> None:
    """Write duecast's bytecode before the clock starts, as `pip install` did for every peer (their
    packages' __pycache__). A checkout run with PYTHONDONTWRITEBYTECODE=1 (as on the benchmark
    machine) would otherwise compile its ~110 modules in each process: ~70 ms of CPU apiece that
    an installed duecast never pays. The same as bench/harness.py's compile_bytecode."""
    root = Path(duecast.__file__).resolve().parent
    compileall.compile_dir(root, maxlevels=0, quiet=1)
    for part in ("cli", "dispatcher", "examples", "integrations", "shared", "worker"):
        compileall.compile_dir(root / part, quiet=1)


def drain(settings: Settings, opts: Options, workers: Workers) -> Drain:
    """Start the dispatcher and workers, poll the backlog until it is 0, stop them."""
    table = quote(settings.jobs.table)
    with closing(connect(settings.mysql)) as poll:
        poll.autocommit(True)
        started = time.monotonic()
        workers.start("dispatcher", [sys.executable, "-m", "duecast.dispatcher"])
        # One parent, its W workers forked once it has imported (as Dramatiq's --processes W).
        forked = ["--app", "duecast_app", "--processes", str(opts.workers)]
        workers.start("workers", [sys.executable, "-m", "duecast.worker", *forked])
        try:
            result = time_drain(mysql_backlog(poll, table), opts.jobs, started, opts.timeout_s, workers)
        finally:
            workers.stop()
        return exact_backlog(result, poll, table)


def main(argv: list[str] | None = None) -> int:
    opts = parse_args(__doc__, argv, variants=("plain", "threads"))
    task = TASKS.get((opts.workload, opts.variant))
    if task is None:
        raise SystemExit(f"no {opts.variant} variant for the {opts.workload} workload")
    settings = load_settings()
    migrate.apply(settings)
    enqueue_s, how = enqueue(settings, task, opts.jobs)
    config = opts.log_dir / "duecast.toml"
    write_config(config, opts.variant)
    settings = load_settings(config)  # what the workers read: the settings reported below
    workers = Workers(opts.log_dir, child_env(DUECAST_CONFIG=str(config)))
    compile_bytecode()
    result = drain(settings, opts, workers)
    queue = build_queue(settings)
    stats = queue.stats(f"{JOBS_SOURCE}.default")
    errors, shutdown_errors = workers.errors()
    if not result.timed_out and stats.get("acked", 0) < opts.jobs:
        errors.append(f"acked counter {stats.get('acked', 0)} < {opts.jobs} jobs")
    src = settings.source(f"{JOBS_SOURCE}.default")
    emit(
        enqueue_s,
        result,
        {
            "enqueue": how,
            "processes": f"1 dispatcher + `duecast worker --processes {opts.workers}` (+1 parent)",
            "claim_batch": src.claim_batch,
            "pop_batch": settings.worker.pop_batch,
            "high_water": src.high_water,
            "worker_concurrency": settings.worker.concurrency,
            "worker_max_in_flight": getattr(settings.worker, "max_in_flight", None),
            "task": task,
            "counters": stats,
        },
        errors,
        shutdown_errors,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
