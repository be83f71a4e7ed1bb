"""Reaper: the leader's duty that requeues what a dead worker had popped, as soon as it is silent.

A worker records its current batch in Redis (ReadyQueue.hold) and beats in MySQL
(shared.storage.worker_registry);
one silent for worker.dead_after_s is dead, and its batch's rows go back to pending now (fenced on
their attempt) instead of after the visibility timeout. Without the record (Redis lost it), the
canary or the sweeper covers them.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from duecast.shared.fanout.keys import BadEntry, Entry, decode_entry
from duecast.shared.fanout.queue import ReadyQueue
from duecast.shared.storage.source_store import Store
from duecast.shared.storage.worker_registry import WorkerRegistry

log = logging.getLogger("duecast.reaper")


class Reaper:
    name = "reaper"

    def __init__(self, registry: WorkerRegistry, stores: Mapping[str, Store], queue: ReadyQueue) -> None:
        self.registry = registry
        self.stores = stores
        self.queue = queue
        self.requeued = 0

    def reap(self) -> int:
        """Requeue the held batch of every dead worker and forget the worker; returns rows requeued."""
        total = 0
        for worker in self.registry.dead():
            held = self.queue.held_by(worker)
            if held is not None and held[0] in self.stores:
                entries = _entries(held[1])
                n = self.stores[held[0]].release(entries) if entries else 0
                if n:
                    log.warning("worker %s is silent: requeued the %d rows of %s it held", worker, n, held[0])
                    self.queue.add_stats(held[0], {"requeued": n})
                total += n
            self.queue.release_hold(worker)
            self.registry.deregister(worker)
        self.requeued += total
        return total


def _entries(raws: list[bytes]) -> list[Entry]:
    out = []
    for raw in raws:
        try:
            out.append(decode_entry(raw))
        except BadEntry:
            continue  # the record is ours, but Redis is not trusted: skip what does not parse
    return out
