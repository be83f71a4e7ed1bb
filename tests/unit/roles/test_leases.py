"""The lease keeper's decisions (shared.policy) and its two threads (shared.storage.leased.keeper),
without MySQL.

The keeper is given a fake `extend` and a `stop` that records instead of ending the process. Leases
are a second or so, so the watchdog's deadlines pass in real time; waits poll with a timeout.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable, Sequence

import pymysql
import pytest

from duecast.dispatcher.leader import Leadership
from duecast.shared.entries import Entry
from duecast.shared.policy import fence_reason, keeper_fits, lease_timing, renewal_outcome, shortest_lease_s
from duecast.shared.settings import MySQLSettings
from duecast.shared.storage.db import Database
from duecast.shared.storage.leased.keeper import (
    EXIT_FENCED,
    EXIT_HUNG,
    LAST_WORDS_S,
    Extended,
    LeaseKeeper,
    keeper_settings,
    last_words,
)

ENTRIES = [Entry(1, 1), Entry(2, 1), Entry(3, 1)]
LEASE_S = 0.9  # renewals every 0.3 s, fence at 0.72 s without one


# -- policy -----------------------------------------------------------------------------------------


def test_lease_timing_renews_every_third_and_fences_at_four_fifths() -> None:
    timing = lease_timing(15)
    assert (timing.renew_s, timing.retry_s, timing.fence_s) == (5, 0.5, 12)


@pytest.mark.parametrize("timeout_s", [0.1, 0.5, 2.0, 10.0])
def test_keeper_fits_exactly_above_the_shortest_lease(timeout_s: float) -> None:
    shortest = shortest_lease_s(timeout_s)
    assert keeper_fits(shortest * 1.001, timeout_s)
    assert not keeper_fits(shortest * 0.999, timeout_s)


@pytest.mark.parametrize(
    ("needed", "kept", "gone", "outcome"),
    [
        ([1, 2], {1, 2}, set(), "confirmed"),
        ([1, 2], {1, 2, 3}, {4}, "confirmed"),  # 3 and 4 are being acked: not needed
        ([], set(), {1}, "confirmed"),  # everything being acked
        ([1, 2], {1}, set(), "unknown"),  # 2 locked by another session this time
        ([1, 2], {1}, {2}, "lost"),
        ([1, 2], set(), {2}, "lost"),
    ],
)
def test_renewal_outcome(needed: list[int], kept: set[int], gone: set[int], outcome: str) -> None:
    assert renewal_outcome(needed, kept, gone) == outcome


def test_fence_reason_lost_then_unconfirmed_then_hung() -> None:
    timing = lease_timing(10)  # fence at 8 s

    def reason(now: float, lost: bool = False, timeout_s: float | None = 30) -> str | None:
        return fence_reason(now, confirmed=100, started=90, lost=lost, timing=timing, timeout_s=timeout_s)

    assert reason(100) is None
    assert reason(107.99) is None
    assert reason(108) == "unconfirmed"
    assert reason(101, lost=True) == "lost"
    assert reason(107, timeout_s=17) == "hung"  # started at 90
    assert reason(120, timeout_s=17) == "unconfirmed"  # both: the lease matters more
    assert reason(107, timeout_s=None) is None


def test_the_keepers_connection_is_cut_off_after_the_keeper_timeout() -> None:
    mysql = MySQLSettings(lease_keeper_timeout_s=1.5)
    keeper = keeper_settings(mysql)
    assert (keeper.connect_timeout_s, keeper.read_timeout_s) == (1.5, 1.5)
    assert (
        keeper_settings(MySQLSettings(connect_timeout_s=1, lease_keeper_timeout_s=3)).connect_timeout_s == 1
    )


# -- the keeper and its watchdog --------------------------------------------------------------------


class Stops:
    """Records what the watchdog would have exited with, and when."""

    def __init__(self) -> None:
        self.codes: list[tuple[int, float]] = []
        self.done = threading.Event()

    def __call__(self, code: int) -> None:
        self.codes.append((code, time.monotonic()))
        self.done.set()


def keeper(extend: Callable[[Database, Sequence[Entry]], Extended], **kw: float) -> tuple[LeaseKeeper, Stops]:
    stops = Stops()
    return LeaseKeeper(extend, LEASE_S, MySQLSettings(), "jobs of test", stop=stops, **kw), stops


def all_kept(calls: list[float]) -> Callable[[Database, Sequence[Entry]], Extended]:
    def extend(_db: Database, entries: Sequence[Entry]) -> Extended:
        calls.append(time.monotonic())
        return Extended(frozenset(e.id for e in entries), frozenset())

    return extend


def test_renewals_keep_a_long_batch_alive() -> None:
    calls: list[float] = []
    keep, stops = keeper(all_kept(calls))
    with keep.holding(ENTRIES, time.monotonic()):
        assert not stops.done.wait(2.5 * LEASE_S)
    assert stops.codes == []
    assert len(calls) >= 5  # every lease/3


def test_a_hanging_renewal_does_not_hold_up_the_fence() -> None:
    release = threading.Event()

    def hang(_db: Database, _entries: Sequence[Entry]) -> Extended:
        release.wait()  # a read that never returns
        raise AssertionError("released")

    keep, stops = keeper(hang)
    since = time.monotonic()
    try:
        with keep.holding(ENTRIES, since):
            assert stops.done.wait(5)
    finally:
        release.set()
    ((code, at),) = stops.codes
    assert code == EXIT_FENCED
    fence_s = lease_timing(LEASE_S).fence_s
    assert fence_s <= at - since < fence_s + 0.2  # on time, inside the lease


def test_failed_renewals_are_retried_and_fence_at_the_deadline_counted_from_the_last_success() -> None:
    calls: list[float] = []
    ok = all_kept(calls)

    def flaky(db: Database, entries: Sequence[Entry]) -> Extended:
        if not calls:
            return ok(db, entries)  # one confirmation, then the database is gone
        calls.append(time.monotonic())
        raise ConnectionRefusedError("down")

    keep, stops = keeper(flaky)
    with keep.holding(ENTRIES, time.monotonic()):
        assert stops.done.wait(5)
    ((code, at),) = stops.codes
    assert code == EXIT_FENCED
    # The confirmation was sent just before calls[0]; the retries came every lease/30 after that.
    fence_s = lease_timing(LEASE_S).fence_s
    assert fence_s - 0.01 <= at - calls[0] < fence_s + 0.2
    assert len(calls) >= 5


def test_a_lost_lease_fences_at_once() -> None:
    def lost(_db: Database, entries: Sequence[Entry]) -> Extended:
        return Extended(frozenset(e.id for e in entries[1:]), frozenset({entries[0].id}))

    keep, stops = keeper(lost)
    since = time.monotonic()
    with keep.holding(ENTRIES, since):
        assert stops.done.wait(5)
    ((code, at),) = stops.codes
    assert code == EXIT_FENCED
    assert at - since < lease_timing(LEASE_S).renew_s + 0.2  # at the first renewal, not the deadline


def test_a_fence_says_its_last_words_first_and_waits_no_longer_than_last_words_s() -> None:
    """A worker hands its popped batch back (Redis) before the fence ends it; a Redis that never
    answers holds the exit up for LAST_WORDS_S at most."""

    def lost(_db: Database, entries: Sequence[Entry]) -> Extended:
        return Extended(frozenset(), frozenset(e.id for e in entries))

    said: list[float] = []
    never = threading.Event()
    keep, stops = keeper(lost)
    try:
        with (
            last_words(lambda: said.append(time.monotonic())),
            last_words(never.wait),
            keep.holding(ENTRIES, time.monotonic()),
        ):
            assert stops.done.wait(5)
    finally:
        never.set()
    ((code, at),) = stops.codes
    assert code == EXIT_FENCED
    (said_at,) = said
    assert said_at <= at < said_at + LAST_WORDS_S + 1.0  # the stuck one waited for, but bounded
    assert at - said_at >= LAST_WORDS_S - 0.05


def test_rows_being_acked_may_leave_running_without_fencing() -> None:
    calls: list[float] = []

    def acked_one(_db: Database, entries: Sequence[Entry]) -> Extended:
        calls.append(time.monotonic())
        return Extended(frozenset(e.id for e in entries[1:]), frozenset({entries[0].id}))

    keep, stops = keeper(acked_one)
    with keep.holding(ENTRIES, time.monotonic()) as hold:
        hold.finishing([ENTRIES[0].id])  # the worker's ack of row 1 began (and committed)
        assert not stops.done.wait(2 * LEASE_S)
    assert len(calls) >= 4


def test_rows_locked_elsewhere_are_retried_and_fence_if_they_stay_locked() -> None:
    calls: list[float] = []

    def locked(_db: Database, entries: Sequence[Entry]) -> Extended:
        calls.append(time.monotonic())
        return Extended(frozenset(e.id for e in entries[1:]), frozenset())

    keep, stops = keeper(locked)
    since = time.monotonic()
    with keep.holding(ENTRIES, since):
        assert stops.done.wait(5)
    ((code, at),) = stops.codes
    assert code == EXIT_FENCED
    assert at - since >= lease_timing(LEASE_S).fence_s
    assert len(calls) >= 5  # retried every lease/30 in between


def test_a_hung_batch_exits_with_its_own_code() -> None:
    keep, stops = keeper(all_kept([]), timeout_s=1.5)
    since = time.monotonic()
    with keep.holding(ENTRIES, since):
        assert stops.done.wait(5)
    ((code, at),) = stops.codes
    assert code == EXIT_HUNG
    assert 1.5 <= at - since < 1.7


def test_a_batch_that_ended_is_never_fenced() -> None:
    entered, release = threading.Event(), threading.Event()

    def hang(_db: Database, _entries: Sequence[Entry]) -> Extended:
        entered.set()
        release.wait()
        return Extended(frozenset(), frozenset({1, 2, 3}))  # would be "lost", but too late to matter

    keep, stops = keeper(hang)
    with keep.holding(ENTRIES, time.monotonic()):
        assert entered.wait(5)  # the renewal is under way when the batch ends
    release.set()
    assert not stops.done.wait(2 * LEASE_S)
    with keep.holding(ENTRIES, time.monotonic()):  # a later batch is watched as before
        assert stops.done.wait(5)
    assert [code for code, _ in stops.codes] == [EXIT_FENCED]


def test_a_closed_keeper_lets_go_of_what_it_held_and_a_later_batch_is_kept_again() -> None:
    """Store.close(): a worker that stopped with batches still held (left to their leases) leaves no
    watchdog behind. Served inside another process (an app, a test), such a watchdog ended that
    process once it could no longer renew them (exit 69 of pytest in two clean-clone CI runs)."""
    calls: list[float] = []
    ok = all_kept(calls)

    def gone(db: Database, entries: Sequence[Entry]) -> Extended:
        if not calls:
            return ok(db, entries)
        raise pymysql.err.ProgrammingError(1146, "Table 'jobs' doesn't exist")  # dropped after the stop

    keep, stops = keeper(gone)
    held = keep.holding(ENTRIES, time.monotonic())
    held.__enter__()  # never left: the batch was still in flight when its worker stopped
    keep.close()
    assert not stops.done.wait(2 * LEASE_S)  # past the fence deadline: nothing watches it any more
    assert stops.codes == []
    held.__exit__(None, None, None)  # its batch ending later is harmless
    calls.clear()
    with keep.holding(ENTRIES, time.monotonic()):  # opened again, the keeper keeps and fences as before
        assert stops.done.wait(5)
    assert [code for code, _ in stops.codes] == [EXIT_FENCED]


class ScriptedLeases:
    """A LeaseStore whose acquire() grants what the script says, or raises it."""

    def __init__(self, script: list[float | Exception]) -> None:
        self.script = script

    def acquire(self, name: str, holder: str, lease_s: float) -> float:
        step = self.script.pop(0)
        if isinstance(step, Exception):
            raise step
        return step

    def resign(self, name: str, holder: str) -> None:
        pass


def test_becoming_leader_is_info_and_a_failed_renewal_one_line_per_try(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A renewal that meets a lost connection is tried again at once (issue 16.10); one that still
    fails is one warning line, no traceback, and leaves the last grant in force: still the leader."""
    down = pymysql.err.OperationalError(2013, "Lost connection to MySQL server during query")
    leadership = Leadership(ScriptedLeases([15.0, down, down, down, down]), lease_s=15, holder="me")  # type: ignore[arg-type]
    with caplog.at_level(logging.DEBUG, logger="duecast"):
        leadership.tick()
        leadership.tick()
    got = [(r.levelname, r.getMessage(), r.exc_info) for r in caplog.records]
    assert got[0] == ("INFO", "now the dispatcher leader (me)", None)
    retries = got[1:4]
    assert [(level, msg.split(";")[0], exc) for level, msg, exc in retries] == [
        (
            "WARNING",
            "the leader lease renewal hit (2013, 'Lost connection to MySQL server during query')",
            None,
        )
    ] * 3
    assert [m.split("(")[-1].split(")")[0] for _, m, _ in retries] == ["1 of 3", "2 of 3", "3 of 3"]
    (level, message, exc_info), *after = got[4:]
    assert (level, exc_info, after) == ("WARNING", None, [])  # not "no longer the dispatcher leader"
    assert re.fullmatch(
        r"could not renew the leader lease; acting on the last renewal for \d+\.\ds more: "
        r"OperationalError: \(2013, 'Lost connection to MySQL server during query'\)",
        message,
    ), message
    assert leadership.held()
