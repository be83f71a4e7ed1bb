"""shared.inflight: a source's in-flight window halves on time-outs and errors, grows while latency
holds and the window is used, holds otherwise, and never leaves [1, ceiling]; and a simulated
capacity-limited service (its calls queue in the client past their timeout) settles with few failures."""

from __future__ import annotations

from dataclasses import replace

import pytest

from duecast.shared.inflight import (
    CUT,
    EASE,
    ERROR_SHARE,
    FAST,
    GROWTH,
    RATE_ROUNDS,
    ROUND_S,
    SLOW,
    STEPS,
    TAIL,
    TIMEOUT_SHARE,
    Round,
    Window,
    congested,
    first_window,
    learnt_timeout_s,
    lowered,
    lowering,
    next_window,
    still_waiting,
)

CEILING = 10_000


def test_a_window_starts_at_the_cap() -> None:
    assert first_window(10_000, 30.0) == Window(10_000, 30.0)
    assert first_window(0, 30.0) == Window(1, 30.0)


@pytest.mark.parametrize(
    ("r", "expected"),
    [
        (Round(), False),  # nothing came: nothing said
        (Round(ok=1000), False),
        (Round(ok=991, timed_out=9), False),  # under TIMEOUT_SHARE: a stray hang is no trend
        (Round(ok=990, timed_out=10), True),
        (Round(timed_out=1), True),
        (Round(ok=91, failed=9), False),  # a few broken rows: a smaller window cannot fix them
        (Round(ok=90, failed=10), True),
        (Round(failed=1), True),
    ],
)
def test_congested(r: Round, expected: bool) -> None:
    assert congested(r) is expected


def test_the_constants_are_what_the_docs_say() -> None:
    assert (TIMEOUT_SHARE, ERROR_SHARE, CUT, EASE) == (0.01, 0.10, 0.5, 0.7)
    assert (TAIL, FAST, SLOW, GROWTH, STEPS, ROUND_S, RATE_ROUNDS) == (0.1, 0.5, 0.75, 16, 256, 0.5, 4)


@pytest.mark.parametrize(
    ("left", "rows", "expected"),
    [(0, 10, False), (1, 10, True), (1, 11, False), (100, 1000, True), (99, 1000, False), (1, 1, True)],
)
def test_a_batch_still_waits_while_a_tenth_of_its_rows_await(left: int, rows: int, expected: bool) -> None:
    assert still_waiting(left, rows) is expected


def test_a_rounds_slowness_is_the_larger_of_its_measures() -> None:
    assert Round().slowness_s is None
    assert Round(latency_s=1.0).slowness_s == 1.0
    assert Round(waiting_s=2.0).slowness_s == 2.0
    assert Round(latency_s=1.0, waiting_s=0.5).slowness_s == 1.0
    assert Round(latency_s=1.0, waiting_s=3.5).slowness_s == 3.5


def test_calls_waiting_near_the_limit_ease_a_window_before_any_outcome() -> None:
    w = Window(1000, 4.0)
    assert next_window(w, Round(peak=1000, waiting_s=3.0), 2.0, CEILING) == w
    assert next_window(w, Round(peak=1000, waiting_s=3.1), 2.0, CEILING) == Window(700, 4.0, cut_at=2.0)


@pytest.mark.parametrize(
    ("limit", "r", "expected"),
    [
        (30.0, Round(ok=1), 30.0),  # no time-out: the source's
        (30.0, Round(timed_out=1, timed_out_after_s=5.2), 5.2),  # the client's own, shorter
        (5.0, Round(timed_out=1, timed_out_after_s=7.0), 5.0),  # only ever lower
        (30.0, Round(timed_out=1, timed_out_after_s=0.0), 30.0),
        (30.0, Round(ok=9, timed_out=1, latency_s=4.0, timed_out_after_s=5.0), 5.0),
        (30.0, Round(ok=9, timed_out=1, latency_s=5.2, timed_out_after_s=5.0), 5.0),  # successes near it
        (30.0, Round(ok=9, timed_out=1, latency_s=0.5, timed_out_after_s=0.2), 30.0),  # far quicker
    ],
)
def test_the_time_limit_is_the_shortest_time_out_seen(limit: float, r: Round, expected: float) -> None:
    assert learnt_timeout_s(limit, r) == expected


def test_an_empty_round_changes_nothing_but_a_lowered_ceiling() -> None:
    w = Window(800, 5.0, cut_at=3.0)
    assert next_window(w, Round(), 10.0, CEILING) == w
    assert next_window(w, Round(), 10.0, 500) == Window(500, 5.0, 3.0)


def test_time_outs_and_errors_halve_the_window_and_teach_the_time_limit() -> None:
    w = Window(3000, 30.0)
    r = Round(ok=900, timed_out=100, latency_s=0.3, timed_out_after_s=5.1, peak=3000)
    assert next_window(w, r, 7.0, CEILING) == Window(1500, 5.1, cut_at=7.0)
    assert next_window(Window(40, 5.0), Round(ok=9, failed=1), 8.0, CEILING) == Window(20, 5.0, 8.0)
    assert next_window(Window(1, 5.0), Round(failed=5, peak=1), 8.0, CEILING).limit == 1  # never below one
    assert next_window(Window(3, 5.0), Round(failed=5, peak=3), 8.0, CEILING).limit == 1


def test_a_window_at_one_row_stays_in_its_episode() -> None:
    """Nothing is lowered at one row: the last cut stays where the window last dropped, so the rows
    started since still count (a service failing every call fast no longer restarts the clock each
    round, and its 5 s time-outs are counted when they come)."""
    w = Window(1, 5.0, cut_at=3.0)
    assert next_window(w, Round(failed=5, peak=1), 8.0, CEILING) == w
    assert next_window(w, Round(ok=1, latency_s=4.5, peak=1), 8.0, CEILING) == w  # nor an ease
    assert next_window(Window(2, 5.0, cut_at=3.0), Round(failed=5, peak=2), 8.0, CEILING) == Window(
        1, 5.0, 8.0
    )


def test_outcomes_of_rows_started_before_the_cut_are_counted_but_decide_nothing() -> None:
    """One congestion episode, one decrease: time-outs of rows started under the old window (a 5 s
    time-out ends ten rounds after its row started) do not cut again, but are counted, and teach the
    time limit."""
    w = Window(100, 30.0, cut_at=1.0)
    late = Round(earlier_ok=2, earlier_failed=4, earlier_timed_out=50, timed_out_after_s=5.0)
    assert not congested(late)
    assert late.total == 0
    assert late.ended == (56, 50, 4)
    assert next_window(w, late, 2.0, CEILING) == Window(100, 5.0, 1.0)
    quick = replace(late, ok=50, latency_s=0.1, peak=100)  # what started since the cut is quick
    assert next_window(w, quick, 2.0, CEILING) == Window(100 + CEILING // STEPS, 5.0, 1.0)  # grows
    assert quick.ended == (106, 50, 4)
    failing = replace(late, failed=10, peak=100)  # and fails: one decrease, of its own
    assert next_window(w, failing, 2.0, CEILING) == Window(50, 5.0, 2.0)


def test_a_lowering_is_said_only_when_the_limit_drops() -> None:
    r = Round(ok=2, failed=5, earlier_ok=10, earlier_timed_out=3, timed_out_after_s=5.0)
    assert (
        lowering(Window(8, 5.0), Window(4, 5.0, 2.0), r)
        == "from 8 to 4 rows: 3 of 20 calls timed out, 5 failed"
    )
    assert lowering(Window(1, 5.0), Window(1, 5.0), r) is None  # held at one row: nothing new
    assert lowering(Window(8, 5.0), Window(8, 5.0), Round(ok=8)) is None
    assert lowering(Window(8, 5.0), Window(9, 5.0), Round(ok=8)) is None
    eased = lowering(Window(10, 4.0), Window(7, 4.0, 2.0), Round(ok=10, earlier_failed=9, latency_s=3.5))
    assert eased == "from 10 to 7 rows: calls wait near their time limit (~4s)"


def test_latency_nearing_the_limit_eases_the_window_before_calls_time_out() -> None:
    w = Window(1000, 4.0)
    eased = next_window(w, Round(ok=10, latency_s=3.01, peak=1000), 2.0, CEILING)
    assert eased == Window(700, 4.0, cut_at=2.0)
    held = next_window(w, Round(ok=10, latency_s=3.0, peak=1000), 2.0, CEILING)
    assert held == w  # between FAST and SLOW: holds
    grown = next_window(w, Round(ok=10, latency_s=2.0, peak=1000), 2.0, CEILING)
    assert grown.limit == 1000 + 1000 // GROWTH


def test_a_decrease_goes_to_what_the_service_took_when_that_is_less() -> None:
    # 200 calls/s served: at FAST x a 1 s limit, 100 fit
    r = Round(ok=10, timed_out=90, timed_out_after_s=1.0, served_per_s=200.0, peak=5000)
    assert lowered(5000, CUT, r, 1.0) == 100
    assert next_window(Window(5000, 30.0), r, 3.0, CEILING) == Window(100, 1.0, cut_at=3.0)
    slow = Round(ok=100, latency_s=0.8, served_per_s=200.0, peak=5000)
    assert next_window(Window(5000, 1.0), slow, 3.0, CEILING) == Window(100, 1.0, cut_at=3.0)
    assert lowered(150, CUT, r, 1.0) == 75  # the halving, when that is less
    assert lowered(150, EASE, replace(r, served_per_s=0.0), 1.0) == 105  # nothing served: the factor alone
    assert lowered(3, CUT, replace(r, served_per_s=0.1), 1.0) == 1  # never below one


def test_growth_is_a_sixteenth_within_the_ceiling() -> None:
    used = Round(ok=100, latency_s=0.1, peak=2000)
    assert next_window(Window(2000, 5.0), used, 1.0, CEILING) == Window(2000 + 2000 // GROWTH, 5.0)
    assert (
        next_window(Window(3, 5.0), Round(ok=3, latency_s=0.1, peak=3), 1.0, 9).limit == 4
    )  # a row at least
    assert next_window(Window(9990, 5.0), Round(ok=9, peak=9990), 1.0, CEILING).limit == CEILING
    # a few errors (under ERROR_SHARE) do not stop the growth
    assert next_window(Window(2000, 5.0), Round(failed=1, ok=99, peak=2000), 1.0, CEILING).limit == 2125


def test_an_unused_window_does_not_grow() -> None:
    w = Window(2000, 5.0)
    assert next_window(w, Round(ok=100, latency_s=0.1, peak=999), 1.0, CEILING) == w
    assert next_window(w, Round(ok=100, latency_s=0.1, peak=1000), 1.0, CEILING).limit == 2125


def simulate(rate: float, timeout_s: float, rounds: int, ceiling: int = CEILING) -> list[tuple[int, float]]:
    """A service taking `rate` calls/s behind a client queue, always busy (the source's backlog is
    deep): a call waits window / rate, and calls queued past rate x timeout_s time out (after
    timeout_s). Per round: (window, the share of calls that timed out)."""
    w, t, series = first_window(ceiling, 30.0), 0.0, []
    for _ in range(rounds):
        t += ROUND_S
        ok = round(rate * ROUND_S)
        late = round(max(0.0, w.limit - rate * timeout_s) * ROUND_S / timeout_s)
        wait = min(w.limit / rate, timeout_s)
        r = Round(ok, 0, late, wait, timeout_s if late else None, peak=w.limit)
        series.append((w.limit, late / r.total))
        w = next_window(w, r, t, ceiling)
    return series


@pytest.mark.parametrize(("rate", "timeout_s"), [(2000.0, 5.0), (200.0, 1.0), (20_000.0, 5.0)])
def test_a_capacity_limited_service_settles_with_few_failures(rate: float, timeout_s: float) -> None:
    series = simulate(rate, timeout_s, rounds=400)
    late = series[40:]  # after 20 s
    failed = sum(share for _, share in late) / len(late)
    assert failed < 0.05
    assert all(limit >= 1 for limit, _ in series)
    # the window stays where the service is busy (its calls' latency past FAST x EASE of the time
    # limit), short of what times out
    assert min(limit for limit, _ in late) >= min(CEILING, rate * timeout_s * FAST * EASE)
    assert max(limit for limit, _ in late) <= max(rate * timeout_s, 1)


def test_a_service_slower_than_the_default_cap_allows_is_fitted() -> None:
    """What the window fixes: 10,000 in flight at 1,500 calls/s wait 6.7 s, past a 5 s timeout."""
    assert CEILING / 1500 > 5.0
    series = simulate(1500.0, 5.0, rounds=200)
    assert sum(share for _, share in series[40:]) / 160 < 0.05
