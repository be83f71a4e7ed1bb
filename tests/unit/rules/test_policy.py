"""Pacing and backoff policy (shared/policy.py): pure functions, checked exhaustively over small ranges.
Dead jobs, interruptions and suspect groups are in test_policy_interruptions.py."""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterator, Sequence

import pytest

from duecast.shared.policy import (
    CAUSES,
    LEADER_CAUSES,
    Cause,
    claim_room,
    dispatch_delay_s,
    error_backoff_s,
    lease_timing,
    redelivery_backlog,
    redelivery_delay_s,
    redelivery_due,
    retry_delay_s,
    start_in_time,
)

# --- claim_room -------------------------------------------------------------------------------------


def test_claim_room_exhaustive_small_ranges() -> None:
    for length, high_water, batch in itertools.product(range(0, 25), range(1, 21), range(1, 21)):
        room = claim_room(length, high_water, batch)
        assert 0 <= room <= batch
        if length >= high_water:
            assert room == 0  # backpressure: workers are behind, claim nothing
        else:
            assert length + room <= high_water  # a claim never pushes the list past high water
            # ...and claims as much as allowed: a full batch, or exactly up to high water.
            assert room == batch or length + room == high_water


def test_claim_room_examples() -> None:
    assert claim_room(0, 40_000, 2000) == 2000
    assert claim_room(39_000, 40_000, 2000) == 1000
    assert claim_room(40_000, 40_000, 2000) == 0
    assert claim_room(10**9, 40_000, 2000) == 0


def test_claim_room_shrinks_as_the_list_grows() -> None:
    rooms = [claim_room(length, 100, 30) for length in range(0, 150)]
    assert all(a >= b for a, b in itertools.pairwise(rooms))


# --- dispatch_delay_s -------------------------------------------------------------------------------


def test_full_batch_claims_again_at_once() -> None:
    assert dispatch_delay_s(claimed=2000, room=2000, poll_interval_s=0.2) == 0.0


@pytest.mark.parametrize(("claimed", "room"), [(0, 2000), (1999, 2000), (1, 2), (0, 0)])
def test_partial_or_empty_claim_waits_a_poll(claimed: int, room: int) -> None:
    assert dispatch_delay_s(claimed, room, poll_interval_s=0.2) == 0.2


def test_no_room_waits_a_poll_even_though_nothing_was_missed() -> None:
    """room 0 (backpressure) must not read as 'claimed everything': that would spin on Redis."""
    assert dispatch_delay_s(0, 0, poll_interval_s=0.5) == 0.5


def test_dispatch_delay_exhaustive() -> None:
    for claimed, room in itertools.product(range(0, 12), range(0, 12)):
        if claimed > room:
            continue  # a store never returns more than asked
        delay = dispatch_delay_s(claimed, room, 0.25)
        assert delay == (0.0 if room > 0 and claimed == room else 0.25)


# --- error_backoff_s --------------------------------------------------------------------------------


@pytest.mark.parametrize("failures", [0, -1, -100])
def test_no_failure_no_backoff(failures: int) -> None:
    assert error_backoff_s(failures, 0.5, 10.0, random.Random(1)) == 0.0


def _ceiling(failures: int, base_s: float, cap_s: float) -> float:
    """The documented ceiling: base doubled per extra failure, never above the cap."""
    ceiling = base_s
    for _ in range(failures - 1):
        ceiling *= 2
        if ceiling >= cap_s:
            return cap_s
    return min(ceiling, cap_s)


@pytest.mark.parametrize(("base_s", "cap_s"), [(0.5, 10.0), (0.001, 0.002), (1.0, 1.0), (2.0, 1.0)])
def test_backoff_is_jittered_below_a_doubling_capped_ceiling(base_s: float, cap_s: float) -> None:
    rng = random.Random(7)
    for failures in range(1, 80):
        ceiling = _ceiling(failures, base_s, cap_s)
        samples = [error_backoff_s(failures, base_s, cap_s, rng) for _ in range(200)]
        assert all(ceiling / 2 <= s <= ceiling for s in samples)
        assert max(samples) <= cap_s


def test_backoff_ceiling_is_monotonic_then_flat_at_the_cap() -> None:
    """With jitter removed (uniform pinned to its upper bound), the ceiling only grows, up to the cap."""

    class Top(random.Random):
        def uniform(self, a: float, b: float) -> float:
            return b

    top = Top()
    ceilings = [error_backoff_s(f, 0.5, 10.0, top) for f in range(1, 40)]
    assert ceilings[:6] == [0.5, 1.0, 2.0, 4.0, 8.0, 10.0]
    assert all(a <= b for a, b in itertools.pairwise(ceilings))
    assert set(ceilings[5:]) == {10.0}


def test_backoff_jitter_spreads_over_the_whole_range() -> None:
    """Equal jitter: retries of many processes must not stay in lockstep."""
    rng = random.Random(3)
    samples = [error_backoff_s(4, 0.5, 10.0, rng) for _ in range(2000)]  # ceiling 4.0
    assert min(samples) < 2.2
    assert max(samples) > 3.8
    assert len(set(samples)) > 1900


def test_backoff_survives_huge_failure_counts() -> None:
    """A loop failing for days must not overflow the exponent."""
    assert 5.0 <= error_backoff_s(10**9, 0.5, 10.0, random.Random(0)) <= 10.0


def test_backoff_is_deterministic_for_a_seeded_rng() -> None:
    a = [error_backoff_s(f, 0.5, 10.0, random.Random(42)) for f in range(1, 10)]
    b = [error_backoff_s(f, 0.5, 10.0, random.Random(42)) for f in range(1, 10)]
    assert a == b


# ---------------------------------------------------------------- job retries


@pytest.mark.parametrize("errors", range(1, 30))
def test_retry_delay_doubles_with_equal_jitter_up_to_the_cap(errors: int) -> None:
    step = min(3600.0, 2.0 * 2 ** (errors - 1))
    rng = random.Random(errors)
    delays = [retry_delay_s(errors, 2.0, 3600.0, rng) for _ in range(200)]
    assert all(step / 2 <= d <= step for d in delays)
    assert max(delays) - min(delays) > step / 4  # jittered, not constant


def test_retry_delay_is_for_failed_jobs_only() -> None:
    with pytest.raises(ValueError, match="failed at least once"):
        retry_delay_s(0, 1.0, 10.0, random.Random(0))


# --- redelivery: which causes run, how long until the next tick, what a count means ------------------

EVERY_S: dict[Cause, float] = {"lost": 1.0, "expired": 5.0, "interrupted": 5.0, "held": 2.0}


def _subsets(causes: Sequence[Cause]) -> list[tuple[Cause, ...]]:
    return [c for n in range(len(causes) + 1) for c in itertools.combinations(causes, n)]


def _cases() -> Iterator[tuple[float, dict[Cause, float], dict[Cause, float], set[Cause], bool]]:
    """Every combination of: the causes run here, when each last ran (never, or 0-6 s ago), the
    backlog, and leadership, at one moment."""
    now = 100.0
    for runs in _subsets(CAUSES):
        every = {c: EVERY_S[c] for c in runs}
        for ages in itertools.product([None, 0.0, 0.5, 1.0, 2.0, 5.0, 6.0], repeat=len(runs)):
            last = {c: now - age for c, age in zip(runs, ages, strict=True) if age is not None}
            for backlog in _subsets(runs):
                for leader in (True, False):
                    yield now, every, last, set(backlog), leader


def test_redelivery_due_exhaustive() -> None:
    for now, every, last, backlog, leader in _cases():
        due = redelivery_due(now, last, every, backlog, leader=leader)
        assert list(due) == [c for c in CAUSES if c in due]  # in the one fixed order
        for cause in CAUSES:
            allowed = cause in every and (leader or cause not in LEADER_CAUSES)
            waited = cause not in last or now - last[cause] >= every.get(cause, 0.0)
            assert (cause in due) == (allowed and (cause in backlog or waited)), (cause, every, last, backlog)


def test_redelivery_delay_exhaustive() -> None:
    for now, every, last, backlog, leader in _cases():
        if not every:
            with pytest.raises(ValueError, match="at least one cause"):
                redelivery_delay_s(now, last, every, backlog, leader=leader)
            continue
        delay = redelivery_delay_s(now, last, every, backlog, leader=leader)
        due = redelivery_due(now, last, every, backlog, leader=leader)
        assert 0.0 <= delay <= max(every.values())
        assert (delay == 0.0) == bool(due)  # no tick is slept through, and none spins
        # Ticking after `delay` finds a cause due (or, for a standby, a leader's cause to look at).
        later = redelivery_due(now + delay, last, every, backlog, leader=leader)
        standby_look = not leader and any(c in LEADER_CAUSES and every[c] == delay for c in every)
        assert later or standby_look


def test_redelivery_delay_examples() -> None:
    every: dict[Cause, float] = {"lost": 0.2, "expired": 5.0, "held": 1.0}
    ran: dict[Cause, float] = {"lost": 10.0, "expired": 10.0, "held": 10.0}
    assert redelivery_delay_s(10.0, ran, every, set(), leader=True) == pytest.approx(0.2)
    assert redelivery_delay_s(10.0, ran, every, {"expired"}, leader=True) == 0.0
    assert redelivery_delay_s(10.0, ran, {"expired": 5.0}, set(), leader=False) == 5.0  # look again
    assert redelivery_due(10.0, ran, {"expired": 5.0}, {"expired"}, leader=False) == ()
    assert redelivery_due(10.0, {}, every, set(), leader=False) == ("lost",)


def test_redelivery_backlog_exhaustive() -> None:
    for cause in CAUSES:
        for counts in itertools.product(range(0, 5), repeat=2):
            for batch in range(1, 5):
                full = redelivery_backlog(cause, list(counts), batch)
                assert full == (cause != "held" and max(counts) >= batch)
        assert not redelivery_backlog(cause, [], 1)  # the canary was there: nothing ran


# --- start_in_time ------------------------------------------------------------------------------------


@pytest.mark.parametrize("lease_s", [4.0, 15.0, 300.0])
def test_started_work_runs_only_while_its_first_renewal_is_not_yet_due(lease_s: float) -> None:
    timing = lease_timing(lease_s)
    assert start_in_time(0.0, timing)
    assert start_in_time(lease_s / 3 - 0.01, timing)  # two thirds of the lease left: run
    assert not start_in_time(lease_s / 3, timing)  # a renewal is due and may not confirm in time
    assert not start_in_time(timing.fence_s, timing)  # the watchdog would stop it at once
    assert not start_in_time(lease_s + 5.0, timing)  # the case: the lease has run out
