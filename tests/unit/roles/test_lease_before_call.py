"""No handler starts after its lease could have run out (issue 24, item 2): the lease keeper's Hold is
asked right before each call, on threads and on the event loop, not only when the batch started.
A process stopped past its fence is modelled by moving its last confirmation back."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator, Sequence

import pytest

from duecast.shared.acks import Ack, Row
from duecast.shared.api.handlers import Handler
from duecast.shared.policy import handler_in_time, lease_timing
from duecast.shared.storage.leased.keeper import Hold
from duecast.shared.storage.source_store import AckCounts
from duecast.worker.flight import Flight
from duecast.worker.runner import Completions, LoopRunner, ThreadRunner

LEASE_S = 15.0


class _Batch:
    """A started batch as a Flight sees it, with the lease keeper's hold on it."""

    def __init__(self, rows: list[Row], hold: Hold) -> None:
        self.rows = rows
        self.hold = hold
        self.skipped = 0
        self.later: list[list[object]] = []
        self.suspects = False

    def ack(self, acks: Sequence[tuple[Row, Ack]]) -> AckCounts:
        raise AssertionError("the runners never ack")

    fail = settle = close = ack


def _hold(confirmed_ago_s: float = 0.0) -> Hold:
    return Hold(0, [], time.monotonic() - confirmed_ago_s, lease_timing(LEASE_S), threading.Condition())


def _stop_past_the_fence(hold: Hold) -> None:
    """The process was stopped (SIGSTOP) for longer than its fence: no renewal confirmed since."""
    hold.confirmed -= LEASE_S


def _flight(handler: Handler, n: int, hold: Hold) -> Flight:
    return Flight("s", object(), handler, _Batch([{"id": i} for i in range(n)], hold), limit_s=30.0)  # type: ignore[arg-type]


def _settle(completions: Completions, flight: Flight, timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        completions.clear()
        flight.collect()
        if flight.left == 0:
            return
        assert time.monotonic() < deadline, f"{flight.left} rows still without an outcome"
        completions.wait(0.05)


@pytest.fixture
def completions() -> Completions:
    return Completions()


@pytest.fixture
def loop(completions: Completions) -> Iterator[LoopRunner]:
    runner = LoopRunner(completions, lambda source: lambda seconds: None)
    yield runner
    runner.close()


def test_a_handler_may_start_only_while_the_leases_are_confirmed_within_the_fence() -> None:
    timing = lease_timing(LEASE_S)
    assert handler_in_time(100.0, confirmed=100.0 - timing.fence_s + 0.01, lost=False, timing=timing)
    assert not handler_in_time(100.0, confirmed=100.0 - timing.fence_s, lost=False, timing=timing)
    assert not handler_in_time(100.0, confirmed=100.0, lost=True, timing=timing)
    assert _hold().may_start()
    assert not _hold(confirmed_ago_s=LEASE_S).may_start()


def test_a_thread_skips_every_call_after_the_process_was_stopped_past_its_lease(
    completions: Completions, caplog: pytest.LogCaptureFixture
) -> None:
    hold = _hold()
    called: list[int] = []

    def check(row: Row) -> None:
        called.append(int(row["id"]))
        if row["id"] == 1:
            _stop_past_the_fence(hold)  # stopped right after this call

    runner = ThreadRunner(1, completions)
    try:
        flight = _flight(Handler("s", check, batch=False), 5, hold)
        runner.submit(flight, list(range(5)))
        _settle(completions, flight)
    finally:
        runner.close(wait=True)
    assert called == [0, 1]  # checked before each call, not once at the batch's start
    assert [int(row["id"]) for row, _ in flight.take_done()] == [0, 1]  # the others: to their leases
    assert flight.over
    assert [r.message for r in caplog.records].count(
        "s: a lease ran out before its handler started; running no more of this batch's 5 rows "
        "(they come back by their leases)"
    ) == 1


def test_the_event_loop_skips_calls_once_the_leases_may_have_run_out(
    completions: Completions, loop: LoopRunner
) -> None:
    hold = _hold()
    called: list[int] = []

    async def check(row: Row) -> None:
        called.append(int(row["id"]))
        _stop_past_the_fence(hold)
        await asyncio.sleep(0)

    flight = _flight(Handler("s", None, batch=False, afn=check), 4, hold)
    loop.submit(flight, list(range(4)))
    _settle(completions, flight)
    assert called == [0]
    assert [int(row["id"]) for row, _ in flight.take_done()] == [0]


def test_an_async_batch_handler_is_not_called_once_the_leases_may_have_run_out(
    completions: Completions, loop: LoopRunner
) -> None:
    hold = _hold(confirmed_ago_s=LEASE_S)
    calls: list[int] = []

    async def check_all(rows: list[Row]) -> list[Ack]:
        calls.append(len(rows))
        return [Ack.default() for _ in rows]

    flight = _flight(Handler("s", None, batch=True, afn=check_all), 3, hold)
    loop.submit(flight, [0, 1, 2])
    _settle(completions, flight)
    assert calls == []
    assert flight.take_done() == []
