"""Sweeper: requeues rows dispatched but not acked within their visibility timeout.

Runs as an APScheduler interval job (dispatcher.scheduler), in the dispatcher or alone; `tick()` is one sweep.
"""

from __future__ import annotations

import logging
import time

from duecast.shared.fanout.queue import ReadyQueue
from duecast.shared.process.loop import Tick
from duecast.shared.settings import DispatcherSettings
from duecast.shared.storage.source_store import Store
from duecast.shared.telemetry import observe

log = logging.getLogger("duecast.sweeper")


class Sweeper:
    name = "sweeper"

    def __init__(self, stores: list[Store], queue: ReadyQueue, settings: DispatcherSettings) -> None:
        self.stores = stores
        self.queue = queue
        self.settings = settings
        self.requeued = 0

    def tick(self) -> Tick:
        full = False
        for store in self.stores:
            started = time.perf_counter()
            n = store.requeue_expired(store.src.visibility_timeout_s, self.settings.sweep_batch)
            if n:
                observe.batch_done("sweeper", store.src.name, started)
                log.warning(
                    "requeued %d rows of %s not acked within %.0fs",
                    n,
                    store.src.name,
                    store.src.visibility_timeout_s,
                    extra={"event": "sweeper.requeued", "source": store.src.name, "count": n},
                )
                self.queue.add_stats(store.src.name, {"requeued": n})
                self.requeued += n
            full = full or n >= self.settings.sweep_batch
        delay = 0.0 if full else self.settings.sweep_interval_s
        return Tick(delay, idle=not full)

    def sweep_all(self) -> None:
        """Sweep until nothing expired is left (one scheduled run may take several batches)."""
        while not self.tick().idle:
            pass
