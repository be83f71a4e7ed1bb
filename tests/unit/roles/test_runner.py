"""worker.runner: plain handlers on threads, async ones on the event loop; each call's outcome comes
back as it ends, a call past its limit is cancelled (async) or given up (plain), never waited for."""

from __future__ import annotations

import asyncio
import gc
import threading
import time
import weakref
from collections.abc import Iterator, Sequence
from typing import Any

import pytest

from duecast.shared.acks import Ack, Row
from duecast.shared.api.handlers import Handler
from duecast.shared.api.outcomes import TimedOut
from duecast.shared.storage.source_store import AckCounts
from duecast.worker.flight import Flight, Outcome
from duecast.worker.runner import Completions, LoopRunner, ThreadRunner


class _Batch:
    """The least a Flight needs of a started batch: its rows (nothing here acks)."""

    def __init__(self, rows: list[Row]) -> None:
        self.rows = rows
        self.skipped = 0
        self.later: list[list[object]] = []
        self.suspects = False

    def ack(self, acks: Sequence[tuple[Row, Ack]]) -> AckCounts:
        raise AssertionError("the runners never ack")

    fail = settle = close = ack


def _flight(handler: Handler, n: int, limit_s: float = 30.0) -> Flight:
    return Flight("s", object(), handler, _Batch([{"id": i} for i in range(n)]), limit_s=limit_s)  # type: ignore[arg-type]


def _gather(completions: Completions, flight: Flight, until: int, timeout_s: float = 10.0) -> None:
    """Report outcomes into `flight` until `until` of its rows have one."""
    deadline = time.monotonic() + timeout_s
    while True:
        completions.clear()
        flight.collect()
        if len(flight.rows) - flight.left >= until:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"{flight.left} rows still without an outcome")
        completions.wait(0.05)


def _outcomes(flight: Flight) -> dict[int, Outcome]:
    return {int(row["id"]): outcome for row, outcome in flight.take_done()}


@pytest.fixture
def completions() -> Completions:
    return Completions()


@pytest.fixture
def loop(completions: Completions) -> Iterator[LoopRunner]:
    runner = LoopRunner(completions, lambda source: lambda seconds: None)
    yield runner
    runner.close()


def test_async_rows_overlap_and_each_reports_its_own_outcome(
    completions: Completions, loop: LoopRunner
) -> None:
    now = peak = 0
    lock = threading.Lock()

    async def check(row: Row) -> Ack:
        nonlocal now, peak
        with lock:
            now += 1
            peak = max(peak, now)
        await asyncio.sleep(0.1)
        with lock:
            now -= 1
        if row["id"] == 3:
            raise ValueError("row 3")
        return Ack.touch(float(row["id"]))

    flight = _flight(Handler("s", None, batch=False, afn=check), 200)
    loop.submit(flight, list(range(200)))
    _gather(completions, flight, 200)
    out = _outcomes(flight)
    assert peak == 200  # every row awaited at once: none waited for another
    assert isinstance(out.pop(3), ValueError)
    assert out == {i: Ack.touch(float(i)) for i in range(200) if i != 3}


def test_an_async_row_past_its_limit_is_cancelled_and_the_rest_report_at_once(
    completions: Completions, loop: LoopRunner
) -> None:
    cancelled = threading.Event()

    async def check(row: Row) -> None:
        if row["id"] == 0:
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                cancelled.set()
                raise

    flight = _flight(Handler("s", None, batch=False, afn=check), 10, limit_s=0.3)
    loop.submit(flight, list(range(10)))
    _gather(completions, flight, 9)  # the nine others are in before the hung one's limit
    assert flight.left == 1
    _gather(completions, flight, 10)
    out = _outcomes(flight)
    assert isinstance(out[0], TimedOut)
    assert out[0].limit_s == 0.3
    assert cancelled.is_set()


def test_an_ended_async_call_frees_its_task_while_the_limit_timer_waits(
    completions: Completions, loop: LoopRunner
) -> None:
    """The limit's timer (30 s here) keeps only calls still running: an ended call's task is freed at
    once (by its reference count, no collector pass), not held for the whole limit, where tens of
    thousands of them made every collection longer. The hung call is still cancelled at its limit."""
    ended: list[weakref.ref[asyncio.Task[Any]]] = []
    hung: list[asyncio.Task[Any]] = []

    async def check(row: Row) -> None:
        task = asyncio.current_task()
        assert task is not None
        if row["id"] == 0:
            hung.append(task)
            await asyncio.Event().wait()
        ended.append(weakref.ref(task))

    flight = _flight(Handler("s", None, batch=False, afn=check), 50, limit_s=30.0)
    gc.disable()  # a collection must not be what frees them
    try:
        loop.submit(flight, list(range(50)))
        _gather(completions, flight, 49)
        deadline = time.monotonic() + 5.0
        while any(ref() is not None for ref in ended) and time.monotonic() < deadline:
            time.sleep(0.05)  # a task's last step ends just after its outcome is in the inbox
        assert len(ended) == 49
        assert all(ref() is None for ref in ended)
    finally:
        gc.enable()
    assert len(hung) == 1
    assert not hung[0].done()  # still held by the timer, to be cancelled at 30 s
    hung[0].get_loop().call_soon_threadsafe(hung[0].cancel)
    _gather(completions, flight, 50)
    assert isinstance(_outcomes(flight)[0], TimedOut)


def test_an_async_batch_handler_gets_its_rows_in_one_call(completions: Completions, loop: LoopRunner) -> None:
    calls: list[int] = []

    async def check_all(rows: list[Row]) -> list[Ack]:
        calls.append(len(rows))
        return [Ack.touch(float(r["id"])) for r in rows]

    flight = _flight(Handler("s", None, batch=True, afn=check_all), 50)
    loop.submit(flight, list(range(50)))
    _gather(completions, flight, 50)
    assert calls == [50]
    assert _outcomes(flight) == {i: Ack.touch(float(i)) for i in range(50)}


@pytest.mark.parametrize("threads", [1, 3, 8])
def test_plain_rows_on_threads_report_each_outcome(completions: Completions, threads: int) -> None:
    runner = ThreadRunner(threads, completions)
    try:
        flight = _flight(Handler("s", lambda row: Ack.touch(float(row["id"])), batch=False), 100)
        runner.submit(flight, list(range(100)))
        _gather(completions, flight, 100)
        assert _outcomes(flight) == {i: Ack.touch(float(i)) for i in range(100)}
    finally:
        runner.close(wait=True)


def test_a_stuck_plain_call_is_given_up_and_the_rest_of_its_flight_goes_on(completions: Completions) -> None:
    release = threading.Event()

    def check(row: Row) -> None:
        if row["id"] == 0:
            release.wait(10)

    runner = ThreadRunner(2, completions)
    try:
        flight = _flight(Handler("s", check, batch=False), 20, limit_s=0.2)
        runner.submit(flight, list(range(20)))
        _gather(completions, flight, 19)  # the other thread took every other row
        deadline = time.monotonic() + 5
        while not (late := flight.overdue(time.monotonic())):
            assert time.monotonic() < deadline, "row 0 never became overdue"
            time.sleep(0.05)
        assert late == [(0,)]
        runner.given_up(len(late))
        flight.report([(0, TimedOut("s", 0.2))])
        assert runner.stuck == 1
        release.set()  # the thread ends its call: its late outcome is dropped, the thread is free
        deadline = time.monotonic() + 5
        while runner.stuck:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert flight.collect() == 0  # the late outcome of row 0 is not taken
        assert isinstance(_outcomes(flight)[0], TimedOut)
    finally:
        release.set()
        runner.close(wait=True)


# -- a BaseException from user code (issue 25, item 7) -------------------------------------------------

_RAISED: list[type[BaseException]] = [SystemExit, KeyboardInterrupt, GeneratorExit]


@pytest.mark.parametrize("kind", _RAISED, ids=lambda k: k.__name__)
@pytest.mark.parametrize("batch", [False, True], ids=["row", "batch"])
def test_a_plain_handler_raising_a_base_exception_fails_its_call_and_its_batch_mates_go_on(
    completions: Completions, kind: type[BaseException], batch: bool
) -> None:
    """argparse's SystemExit in a task, a library's sys.exit(): the call's failure, with an outcome
    for every row, never a dead handler thread leaving the rest without one until the time limit."""

    def check(row: Row) -> None:
        if row["id"] == 1:
            raise kind("from user code")

    def check_all(rows: list[Row]) -> None:
        if any(r["id"] == 1 for r in rows):
            raise kind("from user code")

    threads = ThreadRunner(1, completions)
    flight = _flight(Handler("s", check_all if batch else check, batch=batch), 4)
    try:
        threads.submit(flight, list(range(4)))
        _gather(completions, flight, until=4, timeout_s=5)
    finally:
        threads.close(wait=True)
    outcomes = _outcomes(flight)
    assert isinstance(outcomes[1], kind)
    assert all(isinstance(o, kind) if batch else o == Ack.default() for i, o in outcomes.items() if i != 1)


@pytest.mark.parametrize("kind", _RAISED, ids=lambda k: k.__name__)
@pytest.mark.parametrize("batch", [False, True], ids=["row", "batch"])
def test_an_async_handler_raising_a_base_exception_fails_its_call_and_the_loop_goes_on(
    completions: Completions, loop: LoopRunner, kind: type[BaseException], batch: bool
) -> None:
    """On the event loop a SystemExit escaping a task stops run_forever: every later call would
    wait for its time limit. It is that call's failure instead, and the loop serves the next flight."""

    async def check(row: Row) -> None:
        if row["id"] == 1:
            raise kind("from user code")

    async def check_all(rows: list[Row]) -> None:
        if any(r["id"] == 1 for r in rows):
            raise kind("from user code")

    handler = Handler("s", None, batch=batch, afn=check_all if batch else check)
    first = _flight(handler, 4)
    loop.submit(first, list(range(4)))
    _gather(completions, first, until=4, timeout_s=5)
    outcomes = _outcomes(first)
    assert isinstance(outcomes[1], kind)
    assert all(isinstance(o, kind) if batch else o == Ack.default() for i, o in outcomes.items() if i != 1)
    second = _flight(handler, 1)
    second.rows[0]["id"] = 0
    loop.submit(second, [0])
    _gather(completions, second, until=1, timeout_s=5)
    assert _outcomes(second) == {0: Ack.default()}
