"""One started batch in the air: its rows, their outcomes as they come in, and what waits to be acked.

Bookkeeping only, shared by the worker thread, handler threads and the event loop (under a lock):
which rows have an outcome, which run on a thread since when, which were given up. It never
touches MySQL, Redis or a handler.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Sequence
from typing import Any

from ..shared.acks import Ack, Row
from ..shared.api.handlers import Handler
from ..shared.entries import Entry
from ..shared.errors import DuecastError
from ..shared.storage.source_store import Store, WorkBatch

Outcome = Ack | BaseException
log = logging.getLogger("duecast.worker")


class LeaseRanOut(DuecastError):
    """A call not made: its lease may have run out before its handler started (Flight.in_lease). Not
    an outcome to ack: the row is left RUNNING, to come back by its lease."""


RAN_OUT = LeaseRanOut("the lease ran out before its handler started")


class Flight:
    """Rows a store started for this worker, until each has an outcome and every outcome is acked."""

    def __init__(
        self,
        source: str,
        store: Store,
        handler: Handler,
        batch: WorkBatch,
        *,
        limit_s: float,
        later: Sequence[Sequence[Entry]] = (),
    ) -> None:
        self.source = source
        self.store = store
        self.handler = handler
        self.batch = batch
        self.rows: list[Row] = batch.rows
        self.later = [list(group) for group in later]  # groups to start once this one is over
        self.exclusive = batch.suspects  # runs with nothing else in flight beside it
        self.submitted = False  # handed to the runners (an exclusive one waits for the others)
        self.started = time.monotonic()
        self.settled_at = self.started
        self.uniform = handler.route is None  # one way and one limit for every row
        if self.uniform:
            self.on_loop = [handler.fn is None] * len(self.rows)
            self.limits = [limit_s] * len(self.rows)
        else:
            plans = [handler.plan(row) for row in self.rows]
            self.on_loop = [is_async for is_async, _ in plans]
            self.limits = [limit_s if own is None else own for _, own in plans]
        self.left = len(self.rows)  # rows with no outcome yet
        self._known = bytearray(len(self.rows))  # 1: an outcome came (or the row was given up)
        self._done: list[tuple[Row, Outcome]] = []  # outcomes not yet acked
        self.oldest_done: float | None = None  # when the oldest of them came; None: none waits
        self._running: dict[int, float] = {}  # first index of a thread item -> when it began
        self._items: dict[int, Sequence[int]] = {}
        self._lock = threading.Lock()
        self.began = False  # a thread began one of its rows
        self.withdrawn = False  # taken back before any row began (withdraw): no row may begin
        # Outcomes as calls end: each call's (row index, outcome) pairs as one item (a batch call's
        # thousands cost one append and one pop), appended by handler threads and the event loop,
        # drained by the worker thread (deque appends and pops are thread-safe).
        self.inbox: deque[Sequence[tuple[int, Outcome]]] = deque()
        self.late = False  # a call was skipped: the leases may have run out (in_lease)
        # Its number in the worker's started records (Starter.record_started), b"" for none.
        self.record = b""

    # -- from handler threads and the event loop ----------------------------------------------

    def in_lease(self) -> bool:
        """Whether a handler call may start now, asked right before each one: leased work whose
        leases may have run out (a process stopped or starved past its fence) runs nothing more; the
        caller reports RAN_OUT for the rows instead (nothing is acked: they come back by their
        leases, and the watchdog ends the process). Logged once per flight."""
        hold = getattr(self.batch, "hold", None)  # leased batches: the keeper's Hold, until close()
        if hold is None or hold.may_start():
            return True
        if not self.late:
            self.late = True
            log.warning(
                "%s: a lease ran out before its handler started; running no more of this batch's %d "
                "rows (they come back by their leases)",
                self.source,
                len(self.rows),
                extra={"event": "worker.lease_ran_out", "source": self.source},
            )
        return False

    def begin(self, item: Sequence[int]) -> bool:
        """A thread begins `item`; False when the flight was withdrawn (the thread skips it)."""
        with self._lock:
            if self.withdrawn:
                return False
            self.began = True
            self._running[item[0]] = time.monotonic()
            self._items[item[0]] = item
            return True

    def withdraw(self) -> bool:
        """Take back a flight none of whose rows began (all on threads, none begun, none with an
        outcome): no thread will begin one from now on. False when one may have begun."""
        with self._lock:
            if self.began or any(self.on_loop) or self.left < len(self.rows):
                return False
            self.withdrawn = True
            return True

    def end(self, item: Sequence[int]) -> bool:
        """The thread is done with `item`; False when it had been given up (its outcome is late)."""
        with self._lock:
            self._items.pop(item[0], None)
            return self._running.pop(item[0], None) is not None

    # -- on the worker thread ------------------------------------------------------------------

    def collect(self) -> int:
        """Record what came into the inbox; returns how many outcomes were new."""
        pairs = self.drain()
        return self.report(pairs) if pairs else 0

    def drain(self) -> list[tuple[int, Outcome]]:
        """The pairs that came into the inbox since the last drain, in the order they came."""
        inbox = self.inbox
        if not inbox:  # asked of every open flight on every tick: most have nothing new
            return []
        pairs: list[tuple[int, Outcome]] = []  # (a subscripted `list[...]()` cost 0.7 µs a call)
        while inbox:
            pairs.extend(inbox.popleft())
        return pairs

    def indexes(self, on_loop: bool) -> list[int]:
        """The rows that run on the event loop (or on threads)."""
        if self.uniform:  # every row one way: no look at each
            return list(range(len(self.rows))) if self.on_loop and self.on_loop[0] == on_loop else []
        return [i for i, a in enumerate(self.on_loop) if a == on_loop]

    def report(self, pairs: Sequence[tuple[int, Outcome]]) -> int:
        """Record outcomes; returns how many were new (a given-up row's late outcome is not).
        Only the worker thread calls it, so what it changes needs no lock."""
        known, done, rows, new = self._known, self._done, self.rows, 0
        for i, outcome in pairs:
            if known[i]:
                continue
            known[i] = 1
            new += 1
            if outcome is not RAN_OUT:  # a call not made: nothing to ack, the row waits for its lease
                done.append((rows[i], outcome))
        self.left -= new
        if done and self.oldest_done is None:
            self.oldest_done = time.monotonic()
        return new

    def overdue(self, now: float) -> list[Sequence[int]]:
        """Thread items running past their time limit: given up now (their thread is left to finish)."""
        if not self._running:  # asked of every open flight on every tick; an item begun after this
            return []  # look is seen by the next tick, long before its limit
        with self._lock:
            late = [
                self._items[first]
                for first, began in self._running.items()
                if now - began > min(self.limits[i] for i in self._items[first])
            ]
            for item in late:
                del self._running[item[0]]
        return late

    def take_done(self) -> list[tuple[Row, Outcome]]:
        done, self._done, self.oldest_done = self._done, [], None
        return done

    def put_back(self, items: Sequence[tuple[Row, Outcome]]) -> None:
        """Outcomes whose ack failed (MySQL): acked again at a later flush."""
        self._done[:0] = items
        if self.oldest_done is None:
            self.oldest_done = time.monotonic()

    @property
    def pending(self) -> int:
        """Outcomes waiting to be acked."""
        return len(self._done)

    @property
    def over(self) -> bool:
        """Every row has an outcome and every outcome was acked."""
        return self.left == 0 and not self._done

    def running_on_threads(self) -> int:
        with self._lock:
            return len(self._running)

    def describe(self) -> dict[str, Any]:
        return {"source": self.source, "rows": len(self.rows), "left": self.left, "pending": self.pending}
