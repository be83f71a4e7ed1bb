"""An even pace (shared/policy.py spread_phase_us, slot_us): phases of consecutive keys fill every
tenth of a period evenly, a check's slot is its key's latest phase time, and SQL renders the same;
a caught-up re-scan is claimed on a fixed grid of the wall clock (paced_delay_s)."""

from __future__ import annotations

import itertools
from collections import Counter
from decimal import Decimal, getcontext

import pytest

from duecast.shared.pace import PHASE_SCALE, PHASE_STEP, paced_delay_s, slot_us, spread_phase_us
from duecast.shared.queries import pace

PERIODS_US = [1, 7, 1_000, 999_983, 4_000_000, 10_000_000, 86_400_000_000, 366 * 86_400_000_000]


def windows(keys: range, period_us: int, n: int) -> list[int]:
    """How many of the keys are due in each of n equal windows of the period."""
    counts = [0] * n
    for key in keys:
        counts[spread_phase_us(key, period_us) * n // period_us] += 1
    return counts


@pytest.mark.parametrize("period_us", PERIODS_US)
def test_a_phase_is_within_the_period(period_us: int) -> None:
    for key in itertools.chain(range(0, 2_000), [2**31, 2**53 + 1, 2**63 - 1]):
        assert 0 <= spread_phase_us(key, period_us) < period_us


@pytest.mark.parametrize("n", [10, 100, 1_000, 2_000, 10_000, 100_000])
@pytest.mark.parametrize("first", [1, 2, 1_000_001, 7_777_777_777])
def test_any_run_of_consecutive_keys_fills_every_tenth_of_the_period_evenly(n: int, first: int) -> None:
    """Within two keys of n/10 per tenth: ±10% from 200 keys up (a span each, in range mode)."""
    counts = windows(range(first, first + n), 10_000_000, 10)
    assert sum(counts) == n
    assert all(abs(c - n / 10) <= 2 for c in counts), counts


def test_clustered_keys_spread_as_well_as_consecutive_ones() -> None:
    """Two far-apart clusters (ids 1..1000 and 10^12..10^12+999): each cluster spreads by itself."""
    keys = list(range(1, 1_001)) + list(range(10**12, 10**12 + 1_000))
    counts = [0] * 10
    for key in keys:
        counts[spread_phase_us(key, 10_000_000) * 10 // 10_000_000] += 1
    assert all(abs(c - 200) <= 4 for c in counts), counts


@pytest.mark.parametrize("period_us", [1, 7, 1_000, 4_000_000, 10_000_000])
def test_a_slot_is_the_latest_time_at_or_before_now_at_the_keys_phase(period_us: int) -> None:
    for key, now in itertools.product(
        range(0, 40), range(10**9, 10**9 + 3 * period_us, max(1, period_us // 7))
    ):
        slot = slot_us(now, key, period_us)
        assert now - period_us < slot <= now  # never later than the check, under a period earlier
        assert (slot - spread_phase_us(key, period_us)) % period_us == 0  # at the key's phase


def test_a_late_check_keeps_the_slot_it_was_due_at() -> None:
    period = 10_000_000
    slot = slot_us(10**12, 42, period)
    due = slot + period
    for late in (0, 1, 200_000, period - 1):
        assert slot_us(due + late, 42, period) == due  # due again a period after, not after the check
    assert slot_us(due + period, 42, period) == due + period  # a whole period late: the next slot


def test_the_sql_literal_is_the_policys_step_exactly() -> None:
    getcontext().prec = 50
    assert Decimal(pace._STEP) == Decimal(PHASE_STEP) / Decimal(PHASE_SCALE)
    assert "NOW(6)" in pace.slot_sql("`id`", 10)
    assert "`id`" in pace.phase_sql("`id`", 10)


@pytest.mark.parametrize("period_us", [0, -1])
def test_no_slot_without_a_period(period_us: int) -> None:
    with pytest.raises(ValueError, match="period > 0"):
        pace.slot_sql("`id`", period_us)


# --- paced_delay_s: the dispatcher's grid for a caught-up re-scan ---------------------------------


@pytest.mark.parametrize(
    "now_s", [1000.0, 1000.01, 1000.019, 1000.021, 1000.049, 1000.0999, 1_764_300_000.123456]
)
def test_the_next_claim_is_early_in_the_grids_next_step(now_s: float) -> None:
    delay = paced_delay_s(now_s, 0.1)
    assert 0 < delay <= 0.1 + 1e-9
    at = now_s + delay
    assert abs((at - 0.02) - round((at - 0.02) / 0.1) * 0.1) < 1e-6  # on the grid, 20 ms into a step


def test_every_second_holds_the_same_number_of_claims_whatever_each_takes() -> None:
    """Claims 0.2 s after the previous one ended drift: a second then holds 3 or 4 of them. On the
    grid, a dispatcher whose claims take 0 to 90 ms makes 10 in every second."""
    now, claims = 5000.0, []
    for i in range(300):
        now += paced_delay_s(now, 0.1)
        claims.append(now)
        now += (i * 37 % 10) * 0.009  # the claim's own time
    per_second = Counter(int(at) for at in claims)
    whole = [per_second[s] for s in range(5001, int(claims[-1]))]
    assert len(whole) >= 15
    assert set(whole) == {10}
