"""Worker: pop entries while checks are in flight, start them (committed, leased), hand rows to the
runners, and ack outcomes in small fenced batches as they come: no row waits for the slowest of its
batch, and no transaction or row lock is open while a handler runs.

The role is the tick that paces its parts: starting work (worker/starting.py), leaving
(worker/leaving.py), reporting (worker/report.py) and acking (worker/acker.py).
"""

from __future__ import annotations

import os
import time
from collections import Counter
from collections.abc import Callable, Mapping

from ..shared.api.handlers import Handler
from ..shared.fanout.protocol import Queue
from ..shared.inflight import entries_to_pop, fair_rooms
from ..shared.policy import in_flight_cap
from ..shared.process.loop import Tick
from ..shared.settings import WorkerSettings
from ..shared.storage.source_store import Store
from ..shared.telemetry import observe
from .acker import Acker
from .cancels import CancelWatch
from .flight import Flight
from .leaving import Leaver
from .pacing import Windows
from .report import Stats
from .runner import Completions, LoopRunner, ThreadRunner
from .starting import Starter

WAIT_S = 0.01  # with checks in flight and nothing to pop: how long to wait for outcomes
ACTIVE_S = 10.0  # a source with rows in flight this recently keeps its share of the cap (fair_rooms)


class Worker:
    name = "worker"

    def __init__(
        self,
        stores: Mapping[str, Store],
        handlers: Mapping[str, Handler],
        queue: Queue,
        settings: WorkerSettings,
        *,
        process: str | None = None,
        leave: Callable[[int], object] = os._exit,  # tests pass a recorder
    ) -> None:
        self.settings = settings
        self.acker = Acker(settings.error_backoff_s)
        self.completions = Completions()
        self.threads = ThreadRunner(settings.concurrency, self.completions, shared=len(stores) > 1)
        self.loop = LoopRunner(self.completions, observe.handler_timer)
        runners = (self.threads, self.loop)
        self.starter = Starter(
            stores, handlers, queue, settings, process=process, acker=self.acker, runners=runners
        )
        self.stats = Stats(self.acker, queue, time.monotonic())
        self.leaver = Leaver(self.starter, self.acker, self.stats, (*runners, self.completions), leave)
        any_async = any(h.afn is not None for h in handlers.values())
        self.cap = in_flight_cap(settings.max_in_flight, settings.pop_batch, any_async)
        # Sources whose checks may await adapt their own share of the cap to the service they call.
        adaptive = {s: store.src.timeout_s for s, store in stores.items() if handlers[s].afn is not None}
        self.windows = Windows(adaptive, self.cap, settings.pop_batch, time.monotonic())
        self.pop_batch = settings.pop_batch
        self.busy_at: dict[str, float] = {}  # when each source last had rows in flight
        self.cancels: CancelWatch | None = None  # serving job queues: set by worker/main.py

    def tick(self) -> Tick:
        now = time.monotonic()
        flights = self.flights
        self.completions.clear()
        for flight in flights:
            self.collect(flight, now)
        self.leaver.expire(now)
        if self.cancels is not None:
            self.cancels.tick(now)
        self.acker.settle(flights, now)
        self.acker.flush(flights, now)
        self.starter.retire(leaving=self.leaving)
        self.stats.send(now, force=not flights)
        if self.leaving:
            self.leaver.when_quiet()
            self.completions.wait(WAIT_S)
            return Tick(0.0, idle=False)
        by_source = self.in_flight_by_source()
        self.windows.judge(now, by_source, flights)
        alone = self.starter.holding or any(f.exclusive for f in flights)  # suspects run with nothing beside
        # Each source served keeps room under the cap: a slow backlog of one cannot starve another.
        # Every source paused: all of them, so that the pop waits (Starter.pop) rather than spins.
        serving = self.starter.serving() or list(self.starter.stores)
        active = self.active(now, by_source)
        cap_rooms = {} if alone else fair_rooms(self.cap, by_source, serving, self.pop_batch, active)
        rooms = self.windows.rooms(cap_rooms, by_source)
        counts = self.entries(rooms, by_source, shared=len(serving) > 1)
        if counts:
            popped = self.starter.pop(counts, block=not flights)
            if popped is not None:
                self.starter.launch(*popped)
                self.windows.saw(self.in_flight_by_source())
                return Tick(0.0, idle=False)
        if not flights:
            return Tick(0.0, idle=True)  # the pop already waited block_timeout_s
        self.completions.wait(WAIT_S)
        return Tick(0.0, idle=False)

    def collect(self, flight: Flight, now: float) -> None:
        """Record the outcomes that came for `flight` (as Flight.collect) and feed its window."""
        pairs = flight.drain()
        if pairs:
            flight.report(pairs)
            self.windows.record(flight, pairs, now)

    def entries(
        self, rooms: Mapping[str, int], in_flight: Mapping[str, int], *, shared: bool
    ) -> dict[str, int]:
        """Entries each source may pop for its room in rows (shared.inflight.entries_to_pop)."""
        per_entry, counts = self.starter.rows_per_entry, {}
        for source, room in rooms.items():
            if n := entries_to_pop(room, per_entry[source], in_flight.get(source, 0), shared=shared):
                counts[source] = n
        return counts

    def active(self, now: float, in_flight: Mapping[str, int]) -> list[str]:
        """Sources with rows in flight within ACTIVE_S: those that keep their share (fair_rooms)."""
        for source, n in in_flight.items():
            if n:
                self.busy_at[source] = now
        return [s for s, at in self.busy_at.items() if now - at < ACTIVE_S]

    def in_flight_by_source(self) -> Counter[str]:
        counts: Counter[str] = Counter()
        for f in self.flights:
            counts[f.source] += f.left + f.pending
        return counts

    @property
    def flights(self) -> list[Flight]:
        return self.starter.flights

    @property
    def in_flight(self) -> int:
        return sum(f.left + f.pending for f in self.flights)

    @property
    def leaving(self) -> bool:
        """Too many handler threads are stuck: finishing what can finish, then exiting."""
        return self.leaver.leaving

    @property
    def counts(self) -> Counter[str]:
        return self.stats.counts

    def finish(self, grace_s: float) -> None:
        """Stopping: pop nothing more, and ack what is in flight for at most `grace_s`."""
        self.leaver.finish(self.tick, grace_s)

    def close(self) -> None:
        self.threads.close(wait=not self.threads.stuck)
        self.loop.close()
