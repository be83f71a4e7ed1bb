"""Celery 5 on the peer workload: N `noop` tasks on a Redis broker, drained by W solo-pool workers.

This module is also the Celery app the workers load (`celery -A celery_peer worker`). No result
backend; the backlog is the broker's queue list plus its `unacked` hash (prefetched messages).
"""

from __future__ import annotations

import os
import sys
import time

import redis
from celery import Celery
from harness import Workers, elapsed, emit, parse_args, time_drain

QUEUE = "celery"  # Celery's default queue: a Redis list of that name
UNACKED = "unacked"  # kombu's hash of delivered, not yet acked messages

app = Celery("celery_peer", broker=os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/0"))
app.conf.update(task_ignore_result=True, broker_connection_retry_on_startup=True)


@app.task(name="noop")
def noop() -> None:
    return None


def enqueue(jobs: int) -> float:
    """`apply_async` in a loop over one producer: one message (LPUSH) per job, connection reused."""
    started = time.monotonic()
    with app.producer_or_acquire() as producer:
        for _ in range(jobs):
            noop.apply_async(producer=producer)
    return elapsed(started)


def worker_argv(i: int) -> list[str]:
    return [
        sys.executable, "-m", "celery", "-A", "celery_peer", "worker",
        "--pool", "solo", "--hostname", f"w{i}@%h", "--loglevel", "WARNING",
        "--without-gossip", "--without-mingle", "--without-heartbeat",
    ]  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    opts = parse_args(__doc__, argv, variants=("apply_async",))
    client = redis.Redis.from_url(app.conf.broker_url)
    enqueue_s = enqueue(opts.jobs)
    workers = Workers(opts.log_dir)
    started = time.monotonic()
    for i in range(opts.workers):
        workers.start(f"celery-{i + 1}", worker_argv(i + 1))
    try:
        result = time_drain(
            lambda: client.llen(QUEUE) + client.hlen(UNACKED), opts.jobs, started, opts.timeout_s, workers
        )
    finally:
        workers.stop()
    emit(
        enqueue_s,
        result,
        {
            "enqueue": "noop.apply_async(producer=...) per job (1 message each)",
            "processes": f"{opts.workers} x `celery worker --pool solo`",
            "prefetch_multiplier": app.conf.worker_prefetch_multiplier,
            "acks_late": app.conf.task_acks_late,
            "result_backend": None,
            "flags": "--without-gossip --without-mingle --without-heartbeat --loglevel WARNING",
        },
        *workers.errors(),
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
