"""A snapshot of every source: MySQL state counts, staleness and freshness, plus Redis list length and
counters.

Read-only; used by `duecast status`, `duecast web`, the dispatcher's gauges and the demo's display.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..fanout.protocol import Queue
from ..storage.source_store import SourceStatus, Store
from .freshness import Freshness, measure


@dataclass(frozen=True)
class SourceSnapshot:
    name: str
    db: SourceStatus
    list_length: int
    counters: dict[str, int]
    freshness: Freshness | None = None  # re-scan sources only
    redis_read: bool = True  # False: Redis did not answer; list_length and counters are unknown


def snapshot(stores: list[Store], queue: Queue) -> list[SourceSnapshot]:
    return [source_snapshot(store, queue) for store in stores]


def source_snapshot(store: Store, queue: Queue) -> SourceSnapshot:
    name = store.src.name
    status = store.status()
    return SourceSnapshot(name, status, queue.length(name), queue.stats(name), measure(store, status))


def mysql_snapshot(store: Store) -> SourceSnapshot:
    """The MySQL side only (every backlog lives there), for when Redis does not answer."""
    status = store.status()
    return SourceSnapshot(store.src.name, status, 0, {}, measure(store, status), redis_read=False)
