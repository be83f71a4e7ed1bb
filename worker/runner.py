"""Where handlers run: plain ones on a thread pool, `async def` ones on an asyncio event loop thread.

Owns concurrency and time limits only. Outcomes go back to the worker thread through Completions
as each call ends, so no row waits for the slowest of its batch; nothing here touches MySQL or Redis.
"""

from __future__ import annotations

import asyncio
import threading
from collections import deque
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

from duecast.worker.flight import Flight, Outcome, TimedOut

_SLICES_PER_THREAD = 4  # a batch handler's rows in more slices than threads keeps threads busy


class Completions:
    """Outcomes on their way to the worker thread: (flight, row indexes, outcome per index)."""

    def __init__(self) -> None:
        self._items: deque[tuple[Flight, Sequence[int], Sequence[Outcome]]] = deque()
        self._ready = threading.Event()

    def put(self, flight: Flight, indexes: Sequence[int], outcomes: Sequence[Outcome]) -> None:
        self._items.append((flight, indexes, outcomes))
        if not self._ready.is_set():  # set() takes a lock and wakes waiters: once per wake-up is enough
            self._ready.set()

    def take(self) -> list[tuple[Flight, Sequence[int], Sequence[Outcome]]]:
        self._ready.clear()  # before draining: a put after this sets it again
        out = []
        while self._items:
            out.append(self._items.popleft())
        return out

    def wait(self, timeout_s: float) -> None:
        self._ready.wait(timeout_s)


class ThreadRunner:
    """Plain handlers on `concurrency` threads. A flight's rows (or a batch handler's slices) are
    pulled one at a time by up to `concurrency` pullers, so a stuck call holds one thread and one
    row, and the rest of the flight goes on without it."""

    def __init__(self, concurrency: int, completions: Completions) -> None:
        self.concurrency = concurrency
        self._completions = completions
        self._pool: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()
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
        for _ in range(min(self.concurrency, len(items))):
            self._pool.submit(self._pull, flight, items)

    def given_up(self, count: int) -> None:
        """`count` calls passed their limit and still hold their threads."""
        with self._lock:
            self.stuck += count

    def _pull(self, flight: Flight, items: deque[Sequence[int]]) -> None:
        handler = flight.handler
        while True:
            try:
                item = items.popleft()
            except IndexError:
                return
            flight.begin(item)
            outcomes = handler.run([flight.rows[i] for i in item])
            if not flight.end(item):  # it was given up: this thread is free again
                with self._lock:
                    self.stuck -= 1
            self._completions.put(flight, item, outcomes)

    def close(self, wait: bool) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=wait, cancel_futures=not wait)


class LoopRunner:
    """`async def` handlers on one event loop in its own thread: one task per row (per call for a
    batch handler), cancelled at the row's time limit. Started at first use."""

    def __init__(self, completions: Completions) -> None:
        self._completions = completions
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self.pending = 0  # calls on the loop (read without a lock: only an estimate for leaving)

    def submit(self, flight: Flight, indexes: list[int]) -> None:
        if not indexes:
            return
        if self._loop is None:
            self._loop = asyncio.new_event_loop()
            self._thread = threading.Thread(target=self._loop.run_forever, name="duecast-loop", daemon=True)
            self._thread.start()
        self._loop.call_soon_threadsafe(self._launch, flight, indexes)

    def _launch(self, flight: Flight, indexes: list[int]) -> None:
        loop = asyncio.get_running_loop()
        by_limit: dict[float, list[asyncio.Task[None]]] = {}
        calls = [indexes] if flight.handler.batch else [[i] for i in indexes]
        for call in calls:
            limit = min(flight.limits[i] for i in call)
            task = loop.create_task(self._call(flight, call, limit))
            by_limit.setdefault(limit, []).append(task)
        self.pending += len(calls)
        for limit, tasks in by_limit.items():  # one timer per limit, not one per row
            loop.call_later(limit, _cancel_running, tasks)

    async def _call(self, flight: Flight, call: list[int], limit: float) -> None:
        handler = flight.handler
        outcomes: Sequence[Outcome]
        try:
            if handler.batch:
                outcomes = await handler.run_batch([flight.rows[i] for i in call])
            else:
                outcomes = [await handler.run_one(flight.rows[call[0]])]
        except asyncio.CancelledError:
            # Our timer is the only canceller; a handler that swallows the cancel ends as it likes.
            outcomes = [TimedOut(flight.source, limit)] * len(call)
        except Exception as exc:
            outcomes = [exc] * len(call)
        finally:
            self.pending -= 1
        self._completions.put(flight, call, outcomes)

    def close(self) -> None:
        loop = self._loop
        if loop is not None:
            loop.call_soon_threadsafe(loop.stop)
            if self._thread is not None:
                self._thread.join(timeout=5)


def _cancel_running(tasks: list[asyncio.Task[None]]) -> None:
    for task in tasks:
        if not task.done():
            task.cancel()
