"""What one demo run saw, sample by sample, and the rates derived from it: the demo's display
(view.py) and the benchmarks read the same numbers. Data only; run.py takes the samples.
"""

from __future__ import annotations

import itertools
import math
import statistics
from dataclasses import dataclass, field
from pathlib import Path

from ...shared.monitor.status import SourceSnapshot


@dataclass
class Sample:
    t: float
    acked: int
    snap: SourceSnapshot


@dataclass
class Run:
    """What one demo run saw; benchmarks read the same numbers."""

    users: int
    workers: int
    period_s: float = 10.0
    mode: str = "ranges"
    samples: list[Sample] = field(default_factory=list)
    exit_codes: dict[str, int] = field(default_factory=dict)
    log_dir: Path | None = None
    cpu_s: dict[str, float] = field(default_factory=dict)  # CPU used per process over the run
    errors: dict[str, str] = field(default_factory=dict)  # process -> last lines of its log

    def rates(self, skip_s: float = 0.0) -> list[float]:
        s = [x for x in self.samples if x.t - self.samples[0].t >= skip_s] if self.samples else []
        return [(b.acked - a.acked) / (b.t - a.t) for a, b in itertools.pairwise(s) if b.t > a.t]

    def window_quantiles(self, skip_s: float) -> tuple[float, float, float] | None:
        """p1, median and p99 of the 1-s windows of checks after skip_s: how even the pace is."""
        rates = sorted(self.rates(skip_s))
        if not rates:
            return None
        return _at(rates, 0.01), statistics.median(rates), _at(rates, 0.99)

    def mean_rate(self, skip_s: float = 0.0) -> float:
        s = [x for x in self.samples if x.t - self.samples[0].t >= skip_s] if self.samples else []
        if len(s) < 2 or s[-1].t <= s[0].t:
            return 0.0
        return (s[-1].acked - s[0].acked) / (s[-1].t - s[0].t)

    def steady_samples(self) -> list[Sample]:
        """Samples after the first full pass over the table: period + 2 s in, and (range mode) once
        the freshness measure says every range has been checked."""
        if not self.samples:
            return []
        start = self.samples[0].t + self.period_s + 2.0
        return [
            s
            for s in self.samples
            if s.t >= start and (s.snap.freshness is None or s.snap.freshness.first_pass is None)
        ]

    def counter(self, name: str) -> int:
        return self.samples[-1].snap.counters.get(name, 0) if self.samples else 0


def _at(ordered: list[float], q: float) -> float:
    """The q-quantile of ordered values, nearest rank."""
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]
