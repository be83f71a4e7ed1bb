"""Readings of the whole system over time, in a bounded ring buffer, and the rates and chart series
derived from them. Rates are deltas of the Redis counters (summed over every process) between two
readings. Pure: whoever takes the readings (`duecast status --watch`, `duecast web`) owns the I/O.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass

from ..shared.monitor.status import SourceSnapshot

# The counters shown as rates, per second.
RATE_FIELDS = ("claimed", "acked", "failed", "requeued")


@dataclass(frozen=True)
class Reading:
    at: float  # time.time() when it was taken
    sources: tuple[SourceSnapshot, ...]

    def source(self, name: str) -> SourceSnapshot | None:
        return next((s for s in self.sources if s.name == name), None)


@dataclass(frozen=True)
class Point:
    """One source at one reading, as the charts plot it."""

    at: float
    rates: dict[str, float]  # per second since the reading before; empty for the first reading
    lag_s: float | None  # how long the oldest due row has been due (0 when nothing is due)
    backlog: int
    in_flight: int
    fresh_share: float | None


def rates(before: SourceSnapshot, after: SourceSnapshot, seconds: float) -> dict[str, float]:
    """Counter deltas per second. A counter that went down was reset (Redis flushed): its delta is
    unknown, and counted as 0 rather than as a negative rate."""
    if seconds <= 0:
        return {}
    return {f: max(0, after.counters.get(f, 0) - before.counters.get(f, 0)) / seconds for f in RATE_FIELDS}


def lag_s(snap: SourceSnapshot) -> float | None:
    age = snap.db.oldest_due_age_s
    return None if age is None else max(0.0, age)


class History:
    """The last `maxlen` readings, oldest first; safe to read while a sampler thread adds to it."""

    def __init__(self, maxlen: int) -> None:
        self._readings: deque[Reading] = deque(maxlen=maxlen)
        self._lock = threading.Lock()

    def add(self, reading: Reading) -> None:
        with self._lock:
            self._readings.append(reading)

    def readings(self) -> list[Reading]:
        with self._lock:
            return list(self._readings)

    def latest(self) -> Reading | None:
        with self._lock:
            return self._readings[-1] if self._readings else None

    def __len__(self) -> int:
        with self._lock:
            return len(self._readings)

    def current_rates(self, name: str) -> dict[str, float]:
        """Per-second rates of `name` between the last two readings; empty until there are two."""
        points = list(self.series(name))
        return points[-1].rates if points else {}

    def series(self, name: str) -> Iterator[Point]:
        """Every reading of source `name`, oldest first, with its rates since the one before."""
        prev: Reading | None = None
        for reading in self.readings():
            snap = reading.source(name)
            if snap is None:
                prev = None
                continue
            before = prev.source(name) if prev is not None else None
            delta = {} if prev is None or before is None else rates(before, snap, reading.at - prev.at)
            yield Point(
                at=reading.at,
                rates=delta,
                lag_s=lag_s(snap),
                backlog=snap.db.due,
                in_flight=snap.db.in_flight,
                fresh_share=None if snap.freshness is None else snap.freshness.fresh_share,
            )
            prev = reading
