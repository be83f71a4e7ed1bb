"""Dramatiq on the peer workload: N `send()`s on a Redis broker, drained by `dramatiq` with W processes.

This module is also the broker module the workers load (`dramatiq dramatiq_peer`). A message's body
leaves the `<namespace>:<queue>.msgs` hash when it is acked, after its actor ran; that hash's
length is the backlog. Variants: `threads` (`dramatiq`, OS threads) and `gevent` (`dramatiq-gevent`,
which monkey-patches before loading this module, so `time.sleep` yields to other greenlets).
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import dramatiq
import redis
from dramatiq.brokers.redis import RedisBroker
from harness import IO_WAIT_S, Workers, elapsed, emit, parse_args, time_drain

# Worker threads per process: Dramatiq's default, 8 (prefetch 16). With 1 thread (prefetch 2) it
# drained ~7x slower in a trial, so the default is its best honest setting here.
THREADS = os.environ.get("BENCH_DRAMATIQ_THREADS", "8")
# Greenlets per process under dramatiq-gevent: the docs' example (`dramatiq-gevent my_app -p 8 -t 250`).
GREENLETS = os.environ.get("BENCH_DRAMATIQ_GREENLETS", "250")
MESSAGES = "dramatiq:default.msgs"  # message bodies not yet acked
DEAD = "dramatiq:default.XQ"  # dead-lettered messages (a no-op never fails; checked anyway)

# Dramatiq's idiom: the broker is module state, set where the actors are declared. redis-py (>= 6)
# caps a pool at 100 connections, and every greenlet acks on its own connection: under
# dramatiq-gevent with 250 greenlets, acks failed with "Too many connections" and were retried
# 5 s later. The pool gets room for every greenlet.
_pool = redis.ConnectionPool.from_url(
    os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/0"), max_connections=int(GREENLETS) + 100
)
broker = RedisBroker(client=redis.Redis(connection_pool=_pool))
dramatiq.set_broker(broker)


@dramatiq.actor(queue_name="default")
def noop() -> None:
    return None


@dramatiq.actor(queue_name="default")
def wait() -> None:
    time.sleep(IO_WAIT_S)  # a greenlet switch under dramatiq-gevent (monkey-patched)


def enqueue(actor: dramatiq.Actor[[], None], jobs: int) -> float:
    """`actor.send()` per job: one Lua script call (HSET + RPUSH) each; Dramatiq has no bulk enqueue."""
    started = time.monotonic()
    for _ in range(jobs):
        actor.send()
    return elapsed(started)


def worker_argv(variant: str, processes: int) -> list[str]:
    if variant == "gevent":
        command = [str(Path(sys.executable).parent / "dramatiq-gevent")]  # the script dramatiq installs
        threads = GREENLETS
    else:
        command = [sys.executable, "-m", "dramatiq"]
        threads = THREADS
    return [*command, "dramatiq_peer", "--processes", str(processes), "--threads", threads]


def main(argv: list[str] | None = None) -> int:
    opts = parse_args(__doc__, argv, variants=("threads", "gevent"))
    client = broker.client
    enqueue_s = enqueue(wait if opts.workload == "io" else noop, opts.jobs)
    workers = Workers(opts.log_dir)
    started = time.monotonic()
    argv_ = worker_argv(opts.variant, opts.workers)
    workers.start("dramatiq", argv_)
    try:
        result = time_drain(lambda: client.hlen(MESSAGES), opts.jobs, started, opts.timeout_s, workers)
    finally:
        workers.stop()
    errors, shutdown_errors = workers.errors()
    if dead := client.zcard(DEAD):
        errors.append(f"{dead} messages dead-lettered")
    threads = int(argv_[-1])
    emit(
        enqueue_s,
        result,
        {
            "enqueue": "actor.send() per job",
            "processes": f"`{Path(argv_[0]).name} -p {opts.workers} -t {threads}` (+1 parent)",
            "prefetch": f"{min(threads * 2, 65535)} per process (threads x 2, default)",
            "middleware": "default",
            "redis_pool_max_connections": _pool.max_connections,
            "task": "wait: time.sleep(0.02), monkey-patched" if opts.workload == "io" else "noop",
        },
        errors,
        shutdown_errors,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
