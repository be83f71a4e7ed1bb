"""arq on the peer workload: N `enqueue_job`s on Redis, drained by W `arq` worker processes (asyncio).

This module is also the worker settings the workers load (`arq arq_peer.WorkerSettings`). A job
leaves the `arq:queue` sorted set when it finishes (after its coroutine ran), so that set's size is
the backlog. arq runs in .bench-venv-arq: it requires redis<6, which Celery's kombu does not allow.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from typing import Any

import redis
from arq import create_pool
from arq.connections import RedisSettings
from harness import IO_WAIT_S, Workers, elapsed, emit, parse_args, time_drain

QUEUE = "arq:queue"  # arq's default queue: a sorted set of job ids
URL = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/0")
# Jobs in flight per worker process. arq's default is 10, meant for jobs that keep a process busy;
# jobs that await I/O want many more, as Celery's `-c 1000` for its gevent pool.
MAX_JOBS = int(os.environ.get("BENCH_ARQ_MAX_JOBS", "1000"))
POLL_DELAY_S = float(os.environ.get("BENCH_ARQ_POLL_DELAY_S", "0.5"))  # arq's default
ENQUEUE_CONCURRENCY = 100  # enqueue_job calls awaited together (one pipeline each)


async def noop(ctx: dict[str, Any]) -> None:
    return None


async def wait(ctx: dict[str, Any]) -> None:
    await asyncio.sleep(IO_WAIT_S)


class WorkerSettings:
    """What `arq arq_peer.WorkerSettings` runs. No results are kept (as Celery's task_ignore_result)."""

    functions = (noop, wait)
    redis_settings = RedisSettings.from_dsn(URL)
    max_jobs = MAX_JOBS
    poll_delay = POLL_DELAY_S
    keep_result = 0


# arq's CLI logs every job's start and end at INFO; the other peers run at WARNING (`--custom-log-dict`).
LOG_CONFIG = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"stderr": {"class": "logging.StreamHandler", "level": "WARNING"}},
    "loggers": {"arq": {"handlers": ["stderr"], "level": "WARNING"}},
}


async def enqueue(function: str, jobs: int) -> float:
    """`enqueue_job` per job, ENQUEUE_CONCURRENCY awaited at a time; arq has no bulk enqueue."""
    pool = await create_pool(WorkerSettings.redis_settings)
    try:
        started = time.monotonic()
        for lo in range(0, jobs, ENQUEUE_CONCURRENCY):
            n = min(ENQUEUE_CONCURRENCY, jobs - lo)
            await asyncio.gather(*(pool.enqueue_job(function) for _ in range(n)))
        return elapsed(started)
    finally:
        await pool.aclose()


def main(argv: list[str] | None = None) -> int:
    opts = parse_args(__doc__, argv)
    client = redis.Redis.from_url(URL)
    enqueue_s = asyncio.run(enqueue("wait" if opts.workload == "io" else "noop", opts.jobs))
    workers = Workers(opts.log_dir)
    argv_ = [
        sys.executable,
        "-m",
        "arq",
        "arq_peer.WorkerSettings",
        "--custom-log-dict",
        "arq_peer.LOG_CONFIG",
    ]
    started = time.monotonic()
    for i in range(opts.workers):
        workers.start(f"arq-{i + 1}", argv_)
    try:
        result = time_drain(lambda: client.zcard(QUEUE), opts.jobs, started, opts.timeout_s, workers)
    finally:
        workers.stop()
    emit(
        enqueue_s,
        result,
        {
            "enqueue": f"ArqRedis.enqueue_job per job, {ENQUEUE_CONCURRENCY} awaited together",
            "processes": f"{opts.workers} x `arq arq_peer.WorkerSettings`",
            "max_jobs": MAX_JOBS,
            "poll_delay_s": POLL_DELAY_S,
            "queue_read_limit": "max(max_jobs * 5, 100) (default)",
            "keep_result": 0,
            "task": "wait: await asyncio.sleep(0.02)" if opts.workload == "io" else "noop",
            "log_level": "WARNING",
        },
        *workers.errors(),
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
