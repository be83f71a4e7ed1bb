"""Feeds the Prometheus metrics of shared/telemetry/metrics.py from what the roles already count; no I/O.

Roles report a unit of work's counts once, to ReadyQueue.add_stats; it calls `record` here, so the
Redis counters (summed over every process) and this process's /metrics never disagree on a name.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from typing import Any

from prometheus_client import Histogram

from . import metrics
from .tally import HistogramTally

# Redis stats field -> counter in shared.telemetry.metrics.COUNTERS. The Redis names came first (and `duecast
# status` shows them); the metric names are the ones operators search for.
STATS_METRICS: dict[str, str] = {
    "claimed": "claimed",
    "popped": "popped",
    "started": "started",
    "acked": "acked",
    "failed": "failed",
    "stale_acks": "stale_acks",
    "stale_entries": "stale_entries",
    "bad": "bad_entries",
    "requeued": "redeliveries",
    "wrong_type_keys": "wrong_type_keys",
    "locked_skipped": "locked_skipped",
    "bad_holds": "bad_holds",
}


def record(source: str, counts: Mapping[str, int]) -> None:
    """Add a unit of work's counts to this process's counters. A field with no metric is skipped:
    counting must never fail the work it counts."""
    for field, n in counts.items():
        name = STATS_METRICS.get(field)
        if name is not None and n > 0:
            metrics.COUNTERS[name].labels(source=source).inc(n)


def count(source: str, name: str, n: int = 1) -> None:
    """Count what has no Redis field (jobs retried or dead): `name` is a key of metrics.COUNTERS."""
    if n > 0:
        metrics.COUNTERS[name].labels(source=source).inc(n)


def batch_done(role: str, source: str, started_s: float) -> None:
    """One unit of work of `role` on `source` took from `started_s` (time.perf_counter()) to now."""
    metrics.BATCH_SECONDS.labels(role=role, source=source).observe(time.perf_counter() - started_s)


def timed(fn: Callable[..., Any], source: str) -> Callable[..., Any]:
    """`fn` with each call timed into handler_duration_seconds{source}.

    A call is one row, one job, or one slice of rows for a batch handler (about 1 us each). A
    transactional task's own work runs later, in the ack transaction, and is not part of its call.
    """
    return _timed(fn, metrics.HANDLER_SECONDS.labels(source=source))


def handler_timer(source: str) -> Callable[[float], None]:
    """What the worker's event loop calls with each async call's seconds (handler_duration_seconds);
    the loop times calls itself, so an async handler gets no wrapper coroutine. Called on the loop:
    the observations are tallied there and added to the histogram at most FLUSH_S later."""
    loop = asyncio.get_running_loop()
    return HistogramTally(metrics.HANDLER_SECONDS.labels(source=source), loop.call_later).add


def _timed(fn: Callable[..., Any], histogram: Histogram) -> Callable[..., Any]:
    clock = time.perf_counter

    def call(*args: Any) -> Any:
        started = clock()
        try:
            return fn(*args)
        finally:
            histogram.observe(clock() - started)

    return call
