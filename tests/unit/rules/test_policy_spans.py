"""Range mode's straggler rule (shared.policy.span_settled) and the pace of the "interrupted" cause
(shared.policy.interrupted_every_s), exhaustively over small cases."""

from __future__ import annotations

import itertools

import pytest

from duecast.shared.policy import (
    INTERRUPTED_CHECKS_PER_LEASE,
    SPAN_SETTLE_AFTER_S,
    interrupted_every_s,
    span_settled,
)


def test_a_span_with_every_outcome_in_is_settled_at_once() -> None:
    for total in range(0, 50):
        assert span_settled(total, 0, 0.0)


def test_a_span_with_more_than_its_stragglers_out_is_never_settled() -> None:
    # 5% of its rows, at least one: 1 for up to 39 rows, 2 from 40, 50 of 1,000.
    for total, allowed in [(1, 1), (19, 1), (39, 1), (40, 2), (59, 2), (60, 3), (1000, 50)]:
        for outstanding in range(1, total + 1):
            expected = outstanding <= allowed
            assert span_settled(total, outstanding, 3600.0) == expected, (total, outstanding)


def test_stragglers_are_left_behind_only_after_the_settle_time() -> None:
    for total in (1, 20, 40, 1000):
        assert not span_settled(total, 1, 0.0)
        assert not span_settled(total, 1, SPAN_SETTLE_AFTER_S - 1e-6)
        assert span_settled(total, 1, SPAN_SETTLE_AFTER_S)
        assert span_settled(total, 1, 10 * SPAN_SETTLE_AFTER_S)


def test_settled_is_monotonic_in_time_and_in_outcomes() -> None:
    times = [0.0, 0.25, SPAN_SETTLE_AFTER_S, 1.0, 60.0]
    for total in range(0, 80):
        for outstanding in range(0, total + 1):
            for earlier, later in itertools.pairwise(times):
                if span_settled(total, outstanding, earlier):
                    assert span_settled(total, outstanding, later)
            if outstanding and span_settled(total, outstanding, 1.0):
                assert span_settled(total, outstanding - 1, 1.0)


@pytest.mark.parametrize(
    ("sweep_s", "leases", "expected"),
    [
        (5.0, [15.0], 1.5),  # the defaults: a dead worker's rows back within 15 s + 1.5 s
        (5.0, [15.0, 3.0, 60.0], 0.3),  # the shortest lease sets the pace
        (0.2, [15.0], 0.2),  # a faster sweep is kept
        (5.0, [100.0], 5.0),  # never slower than the sweep
        (5.0, [], 5.0),  # nothing leased: as the sweep
    ],
)
def test_interrupted_runs_every_sweep_and_often_enough_for_the_shortest_lease(
    sweep_s: float, leases: list[float], expected: float
) -> None:
    every_s = interrupted_every_s(sweep_s, leases)
    assert every_s == pytest.approx(expected)
    assert every_s <= sweep_s
    if leases and sweep_s > min(leases) / INTERRUPTED_CHECKS_PER_LEASE:
        assert every_s == pytest.approx(min(leases) / INTERRUPTED_CHECKS_PER_LEASE)
