"""Celery 5 on the peer workload: N tasks on a Redis broker, drained by W workers (solo or gevent pool).

This module is also the Celery app the workers load (`celery -A celery_peer worker`). No result
backend; the backlog is the broker's queue list plus its `unacked` hash (prefetched messages).
Variants: `solo` (one task at a time per process, for no-op jobs) and `gevent` (`-P gevent -c 1000`,
Celery's documented setup for I/O-bound tasks; the pool monkey-patches, so `time.sleep` yields).
"""

from __future__ import annotations

import os
import sys
import time

import redis
from celery import Celery
from harness import IO_WAIT_S, Workers, elapsed, emit, parse_args, time_drain

QUEUE = "celery"  # Celery's default queue: a Redis list of that name
UNACKED = "unacked"  # kombu's hash of delivered, not yet acked messages
GEVENT_CONCURRENCY = os.environ.get("BENCH_CELERY_GEVENT_CONCURRENCY", "1000")  # the docs' `-c 1000`

app = Celery("celery_peer", broker=os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/0"))
app.conf.update(task_ignore_result=True, broker_connection_retry_on_startup=True)


@app.task(name="noop")
def noop() -> None:
    return None


@app.task(name="wait")
def wait() -> None:
    time.sleep(IO_WAIT_S)  # a greenlet switch under -P gevent (monkey-patched)


def enqueue(task: object, jobs: int) -> float:
    """`apply_async` in a loop over one producer: one message (LPUSH) per job, connection reused."""
    started = time.monotonic()
    with app.producer_or_acquire() as producer:
        for _ in range(jobs):
            task.apply_async(producer=producer)  # type: ignore[attr-defined]
    return elapsed(started)


def worker_argv(i: int, variant: str) -> list[str]:
    pool = (
        ["--pool", "solo"] if variant == "solo" else ["--pool", "gevent", "--concurrency", GEVENT_CONCURRENCY]
    )
    return [
        sys.executable, "-m", "celery", "-A", "celery_peer", "worker",
        *pool, "--hostname", f"w{i}@%h", "--loglevel", "WARNING",
        "--without-gossip", "--without-mingle", "--without-heartbeat",
    ]  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    opts = parse_args(__doc__, argv, variants=("solo", "gevent"))
    client = redis.Redis.from_url(app.conf.broker_url)
    enqueue_s = enqueue(wait if opts.workload == "io" else noop, opts.jobs)
    workers = Workers(opts.log_dir)
    started = time.monotonic()
    for i in range(opts.workers):
        workers.start(f"celery-{i + 1}", worker_argv(i + 1, opts.variant))
    try:
        result = time_drain(
            lambda: client.llen(QUEUE) + client.hlen(UNACKED), opts.jobs, started, opts.timeout_s, workers
        )
    finally:
        workers.stop()
    concurrency = 1 if opts.variant == "solo" else int(GEVENT_CONCURRENCY)
    emit(
        enqueue_s,
        result,
        {
            "enqueue": "task.apply_async(producer=...) per job (1 message each)",
            "processes": f"{opts.workers} x `celery worker --pool {opts.variant}`",
            "concurrency": concurrency,
            "prefetch_multiplier": app.conf.worker_prefetch_multiplier,
            "prefetch_per_process": app.conf.worker_prefetch_multiplier * concurrency,
            "acks_late": app.conf.task_acks_late,
            "result_backend": None,
            "task": "wait: time.sleep(0.02), monkey-patched" if opts.workload == "io" else "noop",
            "flags": "--without-gossip --without-mingle --without-heartbeat --loglevel WARNING",
        },
        *workers.errors(),
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
