"""Where handlers run: plain ones on a thread pool, `async def` ones on an asyncio event loop thread.

Owns concurrency and time limits only. Outcomes go back to the worker thread through Completions
as each call ends, so no row waits for the slowest of its batch; nothing here touches MySQL or Redis.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from ..shared.acks import Ack, Row
from ..shared.api.outcomes import TimedOut
from .flight import RAN_OUT, Flight, Outcome
from .lanes import Lanes

T = TypeVar("T")
Slots = list["asyncio.Task[None] | None"]  # a limit timer's tasks; None once a call has ended
_SLICES_PER_THREAD = 4  # a batch handler's rows in more slices than threads keeps threads busy


class Completions:
    """Wakes the worker thread when outcomes arrive (they wait in each flight's inbox)."""

    def __init__(self) -> None:
        self._ready = threading.Event()

    def wake(self) -> None:
        if not self._ready.is_set():  # set() takes a lock and wakes waiters: once per wake-up is enough
            self._ready.set()

    def clear(self) -> None:
        self._ready.clear()  # before draining the inboxes: a wake after this sets it again

    def wait(self, timeout_s: float) -> None:
        self._ready.wait(timeout_s)


class ThreadRunner:
    """Plain handlers on `concurrency` threads. Rows (or a batch handler's slices) are pulled one at
    a time by up to `concurrency` pullers, so a stuck call holds one thread and one row, and the rest
    goes on without it. Which source's row a free thread takes next is worker/lanes.py's rule: the
    source with fewest calls on threads, so one source's slow backlog cannot hold every thread."""

    def __init__(self, concurrency: int, completions: Completions, *, shared: bool = True) -> None:
        """`shared`: the worker serves several sources, whose rows share the threads by the lanes'
        rule; serving one, each flight's rows are pulled straight from it (no lock per row)."""
        self.concurrency = concurrency
        self.shared = shared
        self._completions = completions
        self._pool: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()
        self._lanes = Lanes(concurrency)
        self.stuck = 0  # threads still running a call that was given up (its time limit passed)

    def submit(self, flight: Flight, indexes: list[int]) -> None:
        if not indexes:
            return
        if flight.handler.batch:
            # One thread: one call with every row, as a batch handler expects; more: slices.
            n = 1 if self.concurrency == 1 else min(len(indexes), self.concurrency * _SLICES_PER_THREAD)
            size = -(-len(indexes) // n)
            items: deque[Sequence[int]] = deque(indexes[i : i + size] for i in range(0, len(indexes), size))
        else:
            items = deque((i,) for i in indexes)
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self.concurrency, "duecast-handler")
        if not self.shared:
            for _ in range(min(self.concurrency, len(items))):
                self._pool.submit(self._pull_alone, flight, items)
            return
        for _ in range(self._lanes.add(flight, items)):
            self._pool.submit(self._pull)

    def given_up(self, count: int) -> None:
        """`count` calls passed their limit and still hold their threads."""
        with self._lock:
            self.stuck += count

    def _pull(self) -> None:
        """Serve the lanes (several sources) until nothing waits."""
        lanes, done = self._lanes, None
        while (taken := lanes.take(done)) is not None:
            flight, item = taken
            done = flight.source
            if not self._call(flight, item):
                lanes.drop(flight, done)  # withdrawn: its rows go back unrun
                done = None

    def _pull_alone(self, flight: Flight, items: deque[Sequence[int]]) -> None:
        """Serve one flight's items (one source served) until none is left."""
        while True:
            try:
                item = items.popleft()
            except IndexError:
                return
            if not self._call(flight, item):
                return  # withdrawn: its rows go back unrun

    def _call(self, flight: Flight, item: Sequence[int]) -> bool:
        """Run `item`'s call and put its outcomes in the inbox; False when the flight was withdrawn."""
        if not flight.in_lease():  # checked right before each call: the rows wait for their leases
            flight.inbox.append([(i, RAN_OUT) for i in item])
            self._completions.wake()
            return True
        if not flight.begin(item):
            return False
        outcomes = flight.handler.run([flight.rows[i] for i in item])
        if not flight.end(item):  # it was given up: this thread is free again
            with self._lock:
                self.stuck -= 1
        flight.inbox.append(list(zip(item, outcomes, strict=True)))
        self._completions.wake()
        return True

    def close(self, wait: bool) -> None:
        """Stop: calls running end (awaited when `wait`); with several sources, rows not begun are
        not run (Worker.finish gave them its grace period: they stay started, back by their leases)."""
        self._lanes.clear()
        if self._pool is not None:
            self._pool.shutdown(wait=wait, cancel_futures=not wait)


class LoopRunner:
    """`async def` handlers on one event loop in its own thread: one task per row (per call for a
    batch handler), cancelled at the row's time limit. Started at first use. Each call's outcome
    goes straight into its flight's inbox: this is the per-row hot path, kept to one coroutine."""

    def __init__(self, completions: Completions, timer: Callable[[str], Callable[[float], None]]) -> None:
        self._completions = completions
        self._timer = timer  # source -> observe(seconds) of the handler-duration histogram
        self._observers: dict[str, Callable[[float], None]] = {}  # made on the loop, once per source
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self.pending = 0  # calls on the loop (read without a lock: only an estimate for leaving)

    def submit(self, flight: Flight, indexes: list[int]) -> None:
        if not indexes:
            return
        self._started().call_soon_threadsafe(self._launch, flight, indexes)

    def run(self, call: Awaitable[T]) -> T:
        """Await `call` on the loop (the app's async start/stop hooks) and return its result."""

        async def wrapped() -> T:
            return await call

        return asyncio.run_coroutine_threadsafe(wrapped(), self._started()).result()

    def _started(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            self._loop = new_event_loop()
            self._thread = threading.Thread(target=self._loop.run_forever, name="duecast-loop", daemon=True)
            self._thread.start()
        return self._loop

    def _launch(self, flight: Flight, indexes: list[int]) -> None:
        loop = asyncio.get_running_loop()
        observe = self._observers.get(flight.source)
        if observe is None:
            observe = self._observers[flight.source] = self._timer(flight.source)
        # Each limit's timer holds its calls' tasks as slots, and each call empties its own slot as
        # it ends: a timer would otherwise keep every ended task (and its coroutine) alive for its
        # whole limit, tens of thousands at a few thousand checks a second, which the cyclic garbage
        # collector walked again and again (docs/benchmarks.md, "A real HTTP call per check").
        by_limit: dict[float, Slots]
        if flight.handler.batch:
            limit = min(flight.limits[i] for i in indexes)
            slots: Slots = []
            call = self._batch(flight, indexes, limit=limit, observe=observe, slots=slots, slot=0)
            slots.append(loop.create_task(call))
            by_limit = {limit: slots}
        else:
            by_limit = self._row_tasks(loop, flight, indexes, observe)
        self.pending += len(indexes) if not flight.handler.batch else 1
        for limit, each in by_limit.items():  # one timer per limit, not one per row
            loop.call_later(limit, _cancel_running, each)

    def _row_tasks(
        self,
        loop: asyncio.AbstractEventLoop,
        flight: Flight,
        indexes: list[int],
        observe: Callable[[float], None],
    ) -> dict[float, Slots]:
        """A task per row, by time limit; each call empties its own slot as it ends."""
        afn, rows, limits, one = flight.handler.afn, flight.rows, flight.limits, self._one
        assert afn is not None
        if flight.uniform:  # one limit for every row (no route): no look-up per row
            limit = limits[indexes[0]]
            own: Slots = []
            for i in indexes:
                call = one(afn, rows[i], flight, i, limit=limit, observe=observe, slots=own, slot=len(own))
                own.append(loop.create_task(call))
            return {limit: own}
        by_limit: dict[float, Slots] = {}
        for i in indexes:
            limit = limits[i]
            slots = by_limit.get(limit)
            if slots is None:
                slots = by_limit[limit] = []
            call = one(afn, rows[i], flight, i, limit=limit, observe=observe, slots=slots, slot=len(slots))
            slots.append(loop.create_task(call))
        return by_limit

    async def _one(
        self,
        afn: Callable[[Row], Awaitable[Any]],
        row: Row,
        flight: Flight,
        i: int,
        *,
        limit: float,
        observe: Callable[[float], None],
        slots: Slots,
        slot: int,
    ) -> None:
        """One row's call; `slots[slot]` is its task, emptied as it ends (see _launch)."""
        outcome: Outcome
        if not flight.in_lease():  # checked right before the call, not only at launch
            slots[slot] = None
            self.pending -= 1
            flight.inbox.append(((i, RAN_OUT),))
            self._completions.wake()
            return
        began = time.perf_counter()
        try:
            value = await afn(row)
            outcome = DONE if value is None else value if isinstance(value, Ack) else _not_an_ack(value)
        except asyncio.CancelledError:
            # Our timer is the only canceller; a handler that swallows the cancel ends as it likes.
            outcome = TimedOut(flight.source, limit)
        except BaseException as exc:  # SystemExit too: this call's failure, not the event loop's end
            outcome = exc
        observe(time.perf_counter() - began)
        slots[slot] = None
        self.pending -= 1
        flight.inbox.append(((i, outcome),))
        self._completions.wake()

    async def _batch(
        self,
        flight: Flight,
        call: list[int],
        *,
        limit: float,
        observe: Callable[[float], None],
        slots: Slots,
        slot: int,
    ) -> None:
        if not flight.in_lease():
            slots[slot] = None
            self.pending -= 1
            flight.inbox.append([(i, RAN_OUT) for i in call])
            self._completions.wake()
            return
        began = time.perf_counter()
        outcomes: Sequence[Outcome]
        try:
            outcomes = await flight.handler.run_batch([flight.rows[i] for i in call])
        except asyncio.CancelledError:
            outcomes = [TimedOut(flight.source, limit)] * len(call)
        observe(time.perf_counter() - began)
        slots[slot] = None
        self.pending -= 1
        flight.inbox.append(list(zip(call, outcomes, strict=True)))
        self._completions.wake()

    def close(self) -> None:
        loop = self._loop
        if loop is not None:
            loop.call_soon_threadsafe(loop.stop)
            if self._thread is not None:
                self._thread.join(timeout=5)


DONE = Ack.default()


def new_event_loop() -> asyncio.AbstractEventLoop:
    """uvloop's loop where it is installed (a dependency on Linux and macOS: about 40% less CPU per
    awaited check), else asyncio's own."""
    try:
        import uvloop  # noqa: PLC0415  (optional: absent on Windows)
    except ImportError:
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


def _not_an_ack(value: object) -> TypeError:
    return TypeError(f"a handler must return an Ack or None, not {type(value).__name__}")


def _cancel_running(slots: Slots) -> None:
    """A limit's timer: cancel its calls still running (an ended call has emptied its slot)."""
    for task in slots:
        if task is not None and not task.done():
            task.cancel()
