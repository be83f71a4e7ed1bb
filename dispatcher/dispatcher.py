"""Dispatcher: per tick, for each source, claim due rows (commit), then RPUSH their entries.

Owns pacing and backpressure; owns no SQL (the store), no key names (shared.fanout.keys) and no requeue
(dispatcher.redelivery, which also gets back the rows of a push Redis refused).
"""

from __future__ import annotations

import logging
import time
from collections import Counter

from duecast.dispatcher.redelivery import Redelivery
from duecast.shared.fanout.queue import REDIS_ERRORS, ReadyQueue
from duecast.shared.policy import claim_room, dispatch_delay_s
from duecast.shared.process.loop import Tick
from duecast.shared.settings import DispatcherSettings
from duecast.shared.storage.source_store import Store
from duecast.shared.telemetry import observe

log = logging.getLogger("duecast.dispatcher")


class Dispatcher:
    name = "dispatcher"

    def __init__(
        self, stores: list[Store], queue: ReadyQueue, settings: DispatcherSettings, redelivery: Redelivery
    ) -> None:
        self.stores = stores
        self.queue = queue
        self.settings = settings
        self.redelivery = redelivery
        self.counts: Counter[str] = Counter()

    def tick(self) -> Tick:
        delays = [self._dispatch(store) for store in self.stores]
        delay = min(delays, default=self.settings.poll_interval_s)
        return Tick(delay, idle=delay > 0)

    def pause(self, delay_s: float) -> None:
        """Idle wait that an enqueuer's wake-up ends at once (BLPOP, so at most delay_s)."""
        self.queue.wait_wake(delay_s)

    def _dispatch(self, store: Store) -> float:
        src = store.src
        room = claim_room(self.queue.length(src.name), src.high_water, src.claim_batch)
        if room == 0:
            return self.settings.poll_interval_s  # backpressure: workers are behind
        started = time.perf_counter()
        entries = store.claim_due(room)
        if entries:
            # Committed before pushing: if this push is lost, the rows stay DISPATCHED and
            # redelivery requeues them after the visibility timeout. Never push before commit.
            try:
                self.queue.push(src.name, entries)
            except REDIS_ERRORS:
                # Redis refused (down, OOM): the rows go back now, not after the timeout.
                self.redelivery.release_unpushed(store, entries)
                raise
            observe.batch_done("dispatcher", src.name, started)
            self.queue.add_stats(src.name, {"claimed": len(entries)})
            self.counts[src.name] += len(entries)
        return dispatch_delay_s(len(entries), room, self.settings.poll_interval_s)
