"""units.retry_transient with a time budget (worker.unit_retry_s): it spans a server restart of
tens of seconds with backoff, then gives up with the last error; a non-transient error is raised at once."""

from __future__ import annotations

import logging
import random

import pytest

from duecast.shared.storage.units import TransientError, retry_transient

log = logging.getLogger("test.retry_budget")


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, delay: float) -> None:
        self.sleeps.append(delay)
        self.now += delay


def _failing_until(clock: FakeClock, up_at: float) -> object:
    calls: list[float] = []

    def unit() -> str:
        calls.append(clock.now)
        if clock.now < up_at:
            raise TransientError('(2003, "Can\'t connect to MySQL server")', 2003)
        return "done"

    unit.calls = calls  # type: ignore[attr-defined]
    return unit


def _retry(unit: object, clock: FakeClock, budget_s: float) -> object:
    return retry_transient(
        unit,  # type: ignore[arg-type]
        what="batch of users",
        redo="the unit",
        retries=1_000,
        log=log,
        rng=random.Random(7),
        cap_s=1.0,
        sleep=clock.sleep,
        clock=clock,
        budget_s=budget_s,
    )


def test_a_restart_of_20s_is_outlasted_with_backoff_capped_at_error_backoff() -> None:
    clock = FakeClock()
    unit = _failing_until(clock, up_at=20.0)
    assert _retry(unit, clock, budget_s=30.0) == "done"
    assert 20.0 <= clock.now <= 21.0  # the first try after the server is back succeeds, within a cap
    assert clock.sleeps[0] <= 0.05  # backoff grows from 50 ms...
    assert max(clock.sleeps) <= 1.0  # ...to its cap (worker.error_backoff_s)
    assert len(unit.calls) < 40  # type: ignore[attr-defined]  # paced, never a spin


def test_an_outage_longer_than_the_budget_raises_the_last_error_within_it() -> None:
    clock = FakeClock()
    unit = _failing_until(clock, up_at=1e9)
    with pytest.raises(TransientError):
        _retry(unit, clock, budget_s=30.0)
    assert 29.0 <= clock.now <= 30.0  # retried across the whole budget, never past it


def test_a_zero_budget_runs_once() -> None:
    clock = FakeClock()
    unit = _failing_until(clock, up_at=1e9)
    with pytest.raises(TransientError):
        _retry(unit, clock, budget_s=0.0)
    assert unit.calls == [0.0]  # type: ignore[attr-defined]


def test_a_non_transient_error_is_raised_at_once() -> None:
    clock = FakeClock()
    calls: list[int] = []

    def unit() -> str:
        calls.append(1)
        raise ValueError("a bug")

    with pytest.raises(ValueError, match="a bug"):
        _retry(unit, clock, budget_s=30.0)
    assert calls == [1]
    assert clock.sleeps == []
