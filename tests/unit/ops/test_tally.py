"""The handler-duration histogram fed in bulk (shared/telemetry/tally.py) exposes exactly what
observe() per call would: same buckets, count and sum; and nothing waits past one flush."""

from __future__ import annotations

import math
import random
from collections.abc import Callable

from prometheus_client import CollectorRegistry, Histogram, generate_latest

from duecast.shared.telemetry import metrics
from duecast.shared.telemetry.tally import FLUSH_S, HistogramTally


def test_bulk_adds_expose_what_observe_per_call_does() -> None:
    reg_a, reg_b = CollectorRegistry(), CollectorRegistry()
    bounds = [b for b in metrics.HANDLER_SECONDS._upper_bounds if not math.isinf(b)]
    direct = Histogram("h", "h", ["source"], buckets=bounds, registry=reg_a)
    bulk = Histogram("h", "h", ["source"], buckets=bounds, registry=reg_b)
    scheduled: list[tuple[float, Callable[[], None]]] = []
    tally = HistogramTally(bulk.labels(source="s"), lambda s, fn: scheduled.append((s, fn)))
    assert tally.bulk
    rng = random.Random(7)
    # every bucket's edge exactly (a value equal to a bound is in that bucket), and around them
    values = [*bounds, *(b * 1.0001 for b in bounds), 0.0, *(rng.expovariate(20) for _ in range(5000))]
    for v in values:
        direct.labels(source="s").observe(v)
        tally.add(v)
    assert len(scheduled) == 1  # one flush asked for, not one per add
    assert scheduled[0][0] == FLUSH_S
    before = generate_latest(reg_b).decode()
    assert 'h_count{source="s"} 0.0' in before  # nothing shows until the flush
    scheduled[0][1]()
    assert generate_latest(reg_a) == generate_latest(reg_b)
    assert tally.pending == 0
    tally.add(0.5)
    assert len(scheduled) == 2  # the next observation asks for the next flush


def test_a_closing_loop_flushes_at_once() -> None:
    reg = CollectorRegistry()
    h = Histogram("h", "h", buckets=(0.1, 1.0), registry=reg)

    def closed(seconds: float, fn: Callable[[], None]) -> None:
        raise RuntimeError("Event loop is closed")

    tally = HistogramTally(h, closed)
    tally.add(0.05)
    assert "h_count 1.0" in generate_latest(reg).decode()
    assert tally.pending == 0


def test_without_the_bulk_attributes_each_observation_goes_through_observe() -> None:
    seen: list[float] = []

    class Plain:
        def observe(self, amount: float) -> None:
            seen.append(amount)

    tally = HistogramTally(Plain(), lambda s, fn: None)
    assert not tally.bulk
    tally.add(0.25)
    tally.flush()
    assert seen == [0.25]
