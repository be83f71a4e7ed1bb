"""Fleet-wide limits' pure policy (shared.limit_policy: bucket_tokens, limited_claim, refill_wait_s),
exhaustively over small cases: a claim never takes more than the bucket pays for or max_running leaves."""

from __future__ import annotations

import itertools

from duecast.shared.limit_policy import bucket_tokens, limited_claim, refill_wait_s


def test_a_bucket_refills_at_its_rate_up_to_its_burst() -> None:
    assert bucket_tokens(0.0, 0.1, 200.0, 20.0) == 20.0
    assert bucket_tokens(0.0, 0.05, 200.0, 20.0) == 10.0
    assert bucket_tokens(5.0, 10.0, 200.0, 20.0) == 20.0  # never more than the burst


def test_a_clock_that_went_back_adds_no_tokens() -> None:
    assert bucket_tokens(7.0, -3.0, 200.0, 20.0) == 7.0


def test_debt_is_paid_back_before_tokens_are_spent_again() -> None:
    assert bucket_tokens(-100.0, 0.25, 200.0, 20.0) == -50.0
    assert bucket_tokens(-100.0, 0.6, 200.0, 20.0) == 20.0


def test_a_claim_takes_at_most_what_each_limit_allows() -> None:
    tokens_cases = [None, -5.0, 0.0, 0.5, 1.0, 7.9, 20.0, 1000.0]
    rooms = [None, -3, 0, 1, 7, 20, 1000]
    for want, unit, tokens, room in itertools.product(range(0, 25), (1, 3, 1000), tokens_cases, rooms):
        n = limited_claim(want, unit, tokens, room)
        assert 0 <= n <= want
        if tokens is not None:
            assert n * unit <= max(0.0, tokens)
        if room is not None:
            assert n * unit <= max(0, room)
        # ...and as many as they allow: one more entry would break one of them.
        if n < want:
            over_tokens = tokens is not None and (n + 1) * unit > tokens
            over_room = room is not None and (n + 1) * unit > room
            assert over_tokens or over_room, (want, unit, tokens, room, n)


def test_no_limit_takes_what_is_wanted() -> None:
    assert limited_claim(2000, 1, None, None) == 2000
    assert limited_claim(-1, 1, None, None) == 0


def test_a_range_is_claimed_only_when_the_bucket_pays_for_all_its_rows() -> None:
    assert limited_claim(10, 1000, 999.9, None) == 0
    assert limited_claim(10, 1000, 2500.0, None) == 2
    assert limited_claim(10, 1000, None, 1999) == 1


def test_the_refill_wait_is_until_the_bucket_holds_a_claim_worth_making() -> None:
    assert refill_wait_s(0.0, 20.0, 200.0, cap_s=1.0) == 0.1
    assert refill_wait_s(-180.0, 20.0, 200.0, cap_s=1.0) == 1.0  # deep debt: capped
    assert refill_wait_s(25.0, 20.0, 200.0, cap_s=1.0) == 0.0  # already there
    for tokens, checks in itertools.product((-50.0, 0.0, 5.0, 19.9, 20.0), (1.0, 20.0, 2000.0)):
        wait = refill_wait_s(tokens, checks, 200.0, cap_s=5.0)
        assert 0.0 <= wait <= 5.0
        assert bucket_tokens(tokens, wait, 200.0, 1e9) >= min(checks, tokens + 5.0 * 200.0) - 1e-9
