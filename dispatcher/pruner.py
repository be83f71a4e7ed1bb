"""Pruner: deletes finished jobs past their retention (done: jobs.retention_s, dead: dead_retention_s).

A leader duty of the dispatcher (dispatcher/scheduler.py): it deletes batch after batch while they
come full, then rests an interval.
"""

from __future__ import annotations

import logging

from ..shared.process.loop import Tick
from ..shared.storage.leased.jobs import JobStore

log = logging.getLogger("duecast.pruner")


class Pruner:
    name = "pruner"

    def __init__(self, store: JobStore, batch: int, interval_s: float) -> None:
        # One store prunes every queue: the statements range over all of jobs.queues.
        self.store = store
        self.batch = batch
        self.interval_s = interval_s
        self.pruned = 0

    def tick(self) -> Tick:
        n = self.store.prune(self.batch)
        self.pruned += n
        if n:
            log.info("pruned %d finished jobs", n)
        full = n >= self.batch
        return Tick(0.0 if full else self.interval_s, idle=not full)

    def prune_all(self) -> None:
        while not self.tick().idle:
            pass
