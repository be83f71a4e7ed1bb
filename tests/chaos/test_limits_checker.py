"""The limits checker's verdicts on hand-written runs (no servers): the rate bound a token bucket
allows per window, and the calls running at once as the handlers recorded them through faults."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.chaos.checker import Fault
from tests.chaos.limits_checker import (
    FLEET,
    Call,
    RateLimit,
    Span,
    judge_rate,
    judge_running,
    most_in_window,
    most_running,
    read_calls,
    spans,
)

pytestmark = pytest.mark.faults

LIMIT = RateLimit(rate_per_s=100.0, burst=10.0)
KILLED, STOPPED, HEALTHY = 10, 11, 12


def steady(rate: float, start: float, seconds: float) -> list[float]:
    """Claims of one check each, evenly at `rate` per second."""
    return [start + i / rate for i in range(round(rate * seconds))]


def test_the_bound_is_the_rate_a_full_bucket_and_a_grant_held_across_a_stall() -> None:
    assert LIMIT.bound(1.0) == 100 + 10 + 10
    assert LIMIT.bound(10.0) == 1000 + 20
    assert RateLimit(100.0, 10.0, claimers=2).bound(1.0) == 130


def test_most_in_window() -> None:
    assert most_in_window([], 1.0) == (0, 0.0)
    assert most_in_window([0.0, 0.5, 0.99, 1.0, 1.2, 5.0], 1.0) == (4, 0.5)  # 1.0 - 1 s is out
    assert most_in_window([0.0, 3.0, 3.1, 3.2, 3.9], 1.0) == (4, 3.0)


def test_claims_at_the_rate_after_a_full_bucket_are_within_the_bound() -> None:
    claims = [0.0] * 10 + steady(100.0, 0.0, 20.0)  # the bucket's burst at once, then the rate
    verdict = judge_rate(LIMIT, claims, starts=[], buffered=0)
    assert verdict.over == {}
    assert verdict.windows[1.0][0] == 110
    assert (verdict.claims, verdict.statements) == (2010, 2000)  # the burst in one statement


def test_a_grant_held_across_a_stall_lands_with_a_full_bucket_and_is_allowed() -> None:
    """Reserved (10 tokens) before a read lock, claimed after it, beside a full bucket and the rate."""
    claims = steady(100.0, 0.0, 5.0) + [9.0] * 10 + [9.0] * 10 + steady(100.0, 9.0, 1.0)
    assert judge_rate(LIMIT, claims, [], 0).over == {}
    assert judge_rate(LIMIT, [*claims, 9.5], [], 0).over == {"claims 1s": 121}


def test_a_rate_doubled_by_two_leaders_is_over_in_every_window() -> None:
    claims = steady(100.0, 0.0, 5.0) + steady(200.0, 5.0, 12.0)  # a second bucket from 5 s on
    verdict = judge_rate(LIMIT, claims, [], 0)
    assert verdict.over.keys() == {"claims 1s", "claims 10s"}
    assert verdict.over["claims 1s"] >= 200
    assert verdict.over["claims 10s"] >= 2000
    assert "(bound 1020)" in verdict.summary(LIMIT)


def test_handler_starts_may_bunch_by_what_waited_between_claim_and_start() -> None:
    """Claims went on at the rate while no worker started anything (all of them restarting): what
    was listed meanwhile starts at once when they are back; claims never bunched."""
    claims = steady(100.0, 0.0, 10.0)
    starts = steady(100.0, 0.0, 5.0) + [8.0] * 300
    verdict = judge_rate(LIMIT, claims, starts, buffered=200)
    assert verdict.starts == (300, 8.0, 320.0)
    assert verdict.over == {}
    assert "handler starts, the most in 1 s: 300 (bound 320)" in verdict.summary(LIMIT)
    assert judge_rate(LIMIT, claims, starts, buffered=150).over == {"starts 1s": 300}


def test_read_calls_pairs_starts_and_ends(tmp_path: Path) -> None:
    log = tmp_path / "limited.log"
    assert read_calls(log) == []
    # Job 1 ran twice in pid 10 (its ends in order), job 2 was cut short, and a torn record is left out.
    log.write_text(
        "\nS 1 k1 10 1.0 .\n\nS 2 k2 10 1.5 .\n\nS 1 k1 10 2.0 .\n\nE 1 k1 10 1.1 .\n"
        "\nE 1 k1 10 2.1 .\n\nS 3 k0 1"
    )
    assert read_calls(log) == [
        Call(1, "k1", 10, 1.0, 1.1),
        Call(2, "k2", 10, 1.5, None),
        Call(1, "k1", 10, 2.0, 2.1),
    ]


def test_a_call_runs_until_its_end_or_its_process_stops_or_dies() -> None:
    faults = [
        Fault(100.0, "sigkill", KILLED),
        Fault(100.0, "sigstop", STOPPED),
        Fault(110.0, "died", STOPPED),  # resumed, then found dead
    ]
    calls = [
        Call(1, "k", HEALTHY, 99.0, 99.5),
        Call(2, "k", KILLED, 99.5, None),  # killed mid-call
        Call(3, "k", KILLED, 100.001, None),  # started as the kill was on its way
        Call(4, "k", STOPPED, 99.8, 106.0),  # frozen at 100, logged its end once resumed
        Call(5, "k", STOPPED, 100.02, 106.0),  # started as the stop was on its way
        Call(6, "k", STOPPED, 106.1, 106.2),  # a call of its own after the resume: counted whole
        Call(7, "k", HEALTHY, 101.0, None),  # never ended, nothing explains it
    ]
    assert spans(calls, faults) == [
        Span("k", 99.0, 99.5),
        Span("k", 99.5, 100.0),
        Span("k", 100.001, 100.001),
        Span("k", 99.8, 100.0),
        Span("k", 100.02, 100.02),
        Span("k", 106.1, 106.2),
        Span("k", 101.0, float("inf")),
    ]


def test_most_running_per_key_and_fleet_wide() -> None:
    found = [
        Span("a", 0.0, 2.0),
        Span("a", 1.0, 3.0),
        Span("b", 1.5, 2.5),
        Span("b", 2.5, 4.0),  # starts as the other b ends: not two at once
        Span("a", 3.0, 3.5),  # likewise
    ]
    assert most_running(found) == {"a": (2, 1.0), "b": (1, 1.5), FLEET: (3, 1.5)}


def test_judge_running_against_max_running_and_a_per_key_limit() -> None:
    calls = [Call(i, f"k{i % 2}", HEALTHY, 0.1 * i, 0.1 * i + 0.45) for i in range(20)]  # 5 at once
    verdict = judge_running(calls, [], max_running=5)
    assert verdict.most[FLEET][0] == 5
    assert verdict.over == {}
    assert "at most 5 running at once (max_running 5); per key: k0 3, k1 3" in verdict.summary()
    assert judge_running(calls, [], max_running=4).over == {FLEET: 5}
    assert judge_running(calls, [], max_running=5, per_key=2).over == {"k0": 3, "k1": 3}
    assert judge_running(calls, [], max_running=None, per_key=3).over == {}
