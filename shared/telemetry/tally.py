"""HistogramTally: a Prometheus histogram's observations counted locally and added in bulk, so the
per-check hot path pays a bisect and two additions instead of observe()'s locks (issue 28)."""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable
from typing import Any

FLUSH_S = 1.0  # the most an observation waits before /metrics shows it


class HistogramTally:
    """Observations of one histogram child, kept until `flush()` adds them to it. One writer: the
    thread that calls `add` also calls `flush` (the worker's event loop), so nothing needs a lock
    here; the child's own values are thread-safe.

    Adding in bulk uses the child's `_upper_bounds`, `_buckets` and `_sum`, which prometheus-client
    has kept since its first histograms; where they are missing, every observation goes through
    `observe()` as before (tests/unit/ops/test_tally.py compares the two expositions)."""

    def __init__(self, child: Any, later: Callable[[float, Callable[[], None]], object]) -> None:
        """`later(seconds, fn)` calls fn once after that long on the adding thread (the event
        loop's call_later): the first observation after a flush schedules the next flush."""
        self._child = child
        self._later = later
        self.bulk = all(hasattr(child, a) for a in ("_upper_bounds", "_buckets", "_sum"))
        self._bounds: list[float] = list(child._upper_bounds) if self.bulk else []
        self._counts = [0] * len(self._bounds)
        self._sum = 0.0
        self.pending = 0  # observations not yet flushed

    def add(self, seconds: float) -> None:
        if not self.bulk:
            self._child.observe(seconds)
            return
        # Prometheus counts an observation in the first bucket whose bound is >= it (+Inf last).
        self._counts[bisect_left(self._bounds, seconds)] += 1
        self._sum += seconds
        self.pending += 1
        if self.pending == 1:
            try:
                self._later(FLUSH_S, self.flush)
            except RuntimeError:  # the loop is closing: no later, so now
                self.flush()

    def flush(self) -> None:
        if not self.pending:
            return
        counts, self._counts = self._counts, [0] * len(self._bounds)
        total, self._sum, self.pending = self._sum, 0.0, 0
        buckets = self._child._buckets
        for i, n in enumerate(counts):
            if n:
                buckets[i].inc(n)
        self._child._sum.inc(total)
