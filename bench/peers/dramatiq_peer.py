"""Dramatiq on the peer workload: N `noop.send()` on a Redis broker, drained by `dramatiq` with W processes.

This module is also the broker module the workers load (`dramatiq dramatiq_peer`). A message's body
leaves the `<namespace>:<queue>.msgs` hash when it is acked, after its actor ran; that hash's
length is the backlog.
"""

from __future__ import annotations

import os
import sys
import time

import dramatiq
from dramatiq.brokers.redis import RedisBroker
from harness import Workers, elapsed, emit, parse_args, time_drain

# Worker threads per process: Dramatiq's default, 8 (prefetch 16). With 1 thread (prefetch 2) it
# drained ~7x slower in a trial, so the default is its best honest setting here.
THREADS = os.environ.get("BENCH_DRAMATIQ_THREADS", "8")
MESSAGES = "dramatiq:default.msgs"  # message bodies not yet acked
DEAD = "dramatiq:default.XQ"  # dead-lettered messages (a no-op never fails; checked anyway)

# Dramatiq's idiom: the broker is module state, set where the actors are declared.
broker = RedisBroker(url=os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/0"))
dramatiq.set_broker(broker)


@dramatiq.actor(queue_name="default")
def noop() -> None:
    return None


def enqueue(jobs: int) -> float:
    """`noop.send()` per job: one Lua script call (HSET + RPUSH) each; Dramatiq has no bulk enqueue."""
    started = time.monotonic()
    for _ in range(jobs):
        noop.send()
    return elapsed(started)


def main(argv: list[str] | None = None) -> int:
    opts = parse_args(__doc__, argv)
    client = broker.client
    enqueue_s = enqueue(opts.jobs)
    workers = Workers(opts.log_dir)
    started = time.monotonic()
    workers.start(
        "dramatiq",
        [
            sys.executable,
            "-m",
            "dramatiq",
            "dramatiq_peer",
            "--processes",
            str(opts.workers),
            "--threads",
            THREADS,
        ],
    )
    try:
        result = time_drain(lambda: client.hlen(MESSAGES), opts.jobs, started, opts.timeout_s, workers)
    finally:
        workers.stop()
    errors, shutdown_errors = workers.errors()
    if dead := client.zcard(DEAD):
        errors.append(f"{dead} messages dead-lettered")
    emit(
        enqueue_s,
        result,
        {
            "enqueue": "noop.send() per job",
            "processes": f"`dramatiq --processes {opts.workers} --threads {THREADS}` (+1 parent)",
            "prefetch": f"{min(int(THREADS) * 2, 65535)} per process (threads x 2, default)",
            "middleware": "default",
        },
        errors,
        shutdown_errors,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
