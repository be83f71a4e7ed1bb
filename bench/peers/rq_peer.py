"""RQ on the peer workload: `Queue.enqueue_many` of N `noop` jobs, drained by W `SimpleWorker`s.

This module is also where the workers import `rq_peer.noop` from. A job is done when it is in the
queue's finished registry (RQ keeps finished jobs for result_ttl, 500 s by default).
"""

from __future__ import annotations

import os
import sys
import time

import redis
from harness import Workers, elapsed, emit, parse_args, time_drain
from rq import Queue
from rq.registry import FailedJobRegistry, FinishedJobRegistry

ENQUEUE_BATCH = 10_000  # jobs per enqueue_many call (one pipeline each), as duecast's INSERT batch
TASK = "rq_peer.noop"  # by name: run as a script, this module is __main__, which workers cannot import


def noop() -> None:
    return None


def enqueue(queue: Queue, jobs: int) -> float:
    started = time.monotonic()
    for lo in range(0, jobs, ENQUEUE_BATCH):
        n = min(ENQUEUE_BATCH, jobs - lo)
        queue.enqueue_many([Queue.prepare_data(TASK) for _ in range(n)])
    return elapsed(started)


def main(argv: list[str] | None = None) -> int:
    opts = parse_args(__doc__, argv)
    url = os.environ["BENCH_REDIS_URL"]
    client = redis.Redis.from_url(url)
    queue = Queue("default", connection=client)
    finished = FinishedJobRegistry(queue=queue).key
    failed = FailedJobRegistry(queue=queue).key
    enqueue_s = enqueue(queue, opts.jobs)
    workers = Workers(opts.log_dir)
    argv_ = [
        sys.executable, "-m", "rq.cli", "worker", "--url", url, "--worker-class", "rq.worker.SimpleWorker",
        "--logging_level", "WARNING", "default",
    ]  # fmt: skip
    started = time.monotonic()
    for i in range(opts.workers):
        workers.start(f"rq-{i + 1}", [*argv_, "--name", f"bench-{i + 1}"])
    try:
        result = time_drain(
            lambda: opts.jobs - client.zcard(finished) - client.zcard(failed),
            opts.jobs,
            started,
            opts.timeout_s,
            workers,
        )
    finally:
        workers.stop()
    errors, shutdown_errors = workers.errors()
    if n_failed := client.zcard(failed):
        errors.append(f"{n_failed} jobs failed")
    emit(
        enqueue_s,
        result,
        {
            "enqueue": f"Queue.enqueue_many of {ENQUEUE_BATCH:,} Queue.prepare_data(noop) per call",
            "processes": f"{opts.workers} x `rq worker --worker-class rq.worker.SimpleWorker` (no fork)",
            "result_ttl": "500 s (default)",
            "flags": "--logging_level WARNING",
        },
        errors,
        shutdown_errors,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
