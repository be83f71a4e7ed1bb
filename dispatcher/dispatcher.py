"""Dispatcher: per tick, for each source, claim due rows (commit), then RPUSH their entries.

Owns pacing and backpressure; owns no SQL (the store) and no key names (shared.fanout.keys).
"""

from __future__ import annotations

import logging
import os
import time
from collections import Counter

from duecast.shared.fanout.queue import REDIS_ERRORS, ReadyQueue
from duecast.shared.policy import claim_room, dispatch_delay_s
from duecast.shared.process.loop import Tick
from duecast.shared.settings import DispatcherSettings, FaultSettings
from duecast.shared.storage.source_store import Store
from duecast.shared.telemetry import observe

log = logging.getLogger("duecast.dispatcher")


class Dispatcher:
    name = "dispatcher"

    def __init__(
        self,
        stores: list[Store],
        queue: ReadyQueue,
        settings: DispatcherSettings,
        faults: FaultSettings | None = None,
    ) -> None:
        self.stores = stores
        self.queue = queue
        self.settings = settings
        self.faults = faults or FaultSettings()
        self.counts: Counter[str] = Counter()

    def tick(self) -> Tick:
        if self.queue.data_lost():
            self._recover_lost_entries()
        delays = [self._dispatch(store) for store in self.stores]
        delay = min(delays, default=self.settings.poll_interval_s)
        return Tick(delay, idle=delay > 0)

    def _recover_lost_entries(self) -> None:
        """The epoch canary was gone: Redis lost its lists. Every dispatched row no worker holds
        (a started job, a locked row) goes back to pending at once, not after its timeout."""
        for store in self.stores:
            total = 0
            while (n := store.requeue_unstarted(self.settings.sweep_batch)) > 0:
                total += n
            if total:
                log.warning(
                    "Redis lost its entries; requeued %d dispatched rows of %s", total, store.src.name
                )
                self.counts["recovered"] += total
                self.queue.add_stats(store.src.name, {"requeued": total})  # redeliveries, as the sweeper's

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
            if self.faults.crash_after_commit:
                log.warning("fault hook: exiting between COMMIT and RPUSH")
                os._exit(70)
            # Committed before pushing: if this push is lost, the rows stay DISPATCHED and the
            # sweeper requeues them after the visibility timeout. Never push before commit.
            try:
                self.queue.push(src.name, entries)
            except REDIS_ERRORS:
                # Redis refused (down, OOM): give the rows back now instead of stranding them
                # until the visibility timeout. A part that did land is fenced off by the bump.
                released = store.release(entries)
                log.warning("push to Redis failed; released %d claimed rows of %s", released, src.name)
                raise
            observe.batch_done("dispatcher", src.name, started)
            self.queue.add_stats(src.name, {"claimed": len(entries)})
            self.counts[src.name] += len(entries)
        return dispatch_delay_s(len(entries), room, self.settings.poll_interval_s)
