"""The handler threads' waiting work, one lane per source, and the rule for which lane a free thread
serves next. Bookkeeping under one lock only: it runs no handler and touches neither MySQL nor Redis.

The rule (issue 27.8, fairness): a free thread takes the next row (or batch slice) of the source with
the fewest calls running on threads now; ties go in turn. Rows of one source keep their order. So
sources with rows waiting share the threads evenly (max-min fair), and a backlog of slow calls (2 s
tasks) cannot keep another source's rows waiting behind it. And a thread is kept free for each other
source that had rows within ACTIVE_S and runs none now: a source that already runs a call takes no
thread that would leave fewer idle than those. A re-scan's next rows then start at once, not after
the next slow call ends; a source alone (or with one thread) takes every thread, as before.
"""

from __future__ import annotations

import threading
import time
from collections import Counter, deque
from collections.abc import Sequence

from .flight import Flight

Item = Sequence[int]  # row indexes of one call: one row, or a batch handler's slice
ACTIVE_S = 5.0  # a source that had rows this recently keeps a free thread (when it runs none)
RECHECK_S = 0.1  # a puller whose items are all held back looks again this often (and at each add)


class Lanes:
    """Items waiting for a thread, per source, and the pullers (threads serving them) there are."""

    def __init__(self, threads: int) -> None:
        self.threads = threads
        self._lock = threading.Condition(threading.Lock())
        self._seen: dict[str, float] = {}  # when each source last had rows added
        self._lanes: dict[str, deque[tuple[Flight, deque[Item]]]] = {}
        self._running: Counter[str] = Counter()  # calls on threads now, per source (stuck ones too)
        self._turn = 0
        self.waiting = 0
        self.pullers = 0

    def add(self, flight: Flight, items: deque[Item]) -> int:
        """Queue `flight`'s items; returns how many more pullers to start (never past `threads`)."""
        with self._lock:
            self._lanes.setdefault(flight.source, deque()).append((flight, items))
            self._seen[flight.source] = time.monotonic()
            self.waiting += len(items)
            self._lock.notify()  # a puller held back by a reserve may take these
            more = max(0, min(self.threads - self.pullers, self.waiting))
            self.pullers += more
            return more

    def take(self, done: str | None) -> tuple[Flight, Item] | None:
        """The next item for a puller that just ended a call of source `done` (None: its first);
        None when nothing waits: the puller ends."""
        with self._lock:
            if done is not None:
                self._running[done] -= 1
            while (source := self._pick()) is None:
                if not self._lanes:
                    self.pullers -= 1
                    return None
                self._lock.wait(RECHECK_S)  # what waits is held back: a thread kept for another source
            lane = self._lanes[source]
            flight, items = lane[0]
            item = items.popleft()
            self.waiting -= 1
            if not items:
                lane.popleft()
                if not lane:
                    del self._lanes[source]
            self._running[source] += 1
            return flight, item

    def drop(self, flight: Flight, source_done: str) -> None:
        """`flight` was withdrawn: its items waiting go (they go back unrun), and the call of
        `source_done` that found out is over."""
        with self._lock:
            self._running[source_done] -= 1
            lane = self._lanes.get(flight.source)
            if lane is None:
                return
            kept = deque((f, items) for f, items in lane if f is not flight)
            self.waiting -= sum(len(items) for f, items in lane if f is flight)
            if kept:
                self._lanes[flight.source] = kept
            else:
                del self._lanes[flight.source]

    def clear(self) -> None:
        """Closing: nothing waiting begins any more (its rows stay started, back by their leases)."""
        with self._lock:
            self._lanes.clear()
            self.waiting = 0
            self._lock.notify_all()

    def _pick(self) -> str | None:
        lanes, running = self._lanes, self._running
        if not lanes:
            return None
        if len(self._seen) > 1:
            lanes = {s: q for s, q in lanes.items() if not self._held_back(s)}
        if len(lanes) <= 1:  # the hot path: one source waiting
            return next(iter(lanes), None)
        fewest = min(running[s] for s in lanes)
        tied = [s for s in lanes if running[s] == fewest]
        self._turn += 1
        return tied[self._turn % len(tied)]

    def _held_back(self, source: str) -> bool:
        """Whether `source`, already running a call, would take a thread kept for another source."""
        running = self._running
        if running[source] == 0:
            return False
        since = time.monotonic() - ACTIVE_S
        owed = sum(1 for s, at in self._seen.items() if s != source and at > since and running[s] == 0)
        return self.threads - sum(running.values()) - 1 < owed
