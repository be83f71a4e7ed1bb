"""A snapshot of every source: MySQL state counts and staleness plus Redis list length and counters.

Read-only; used by `duecast status` and the demo's live display.
"""

from __future__ import annotations

from dataclasses import dataclass

from shared.queue import ReadyQueue
from shared.store import SourceStatus, Store


@dataclass(frozen=True)
class SourceSnapshot:
    name: str
    db: SourceStatus
    list_length: int
    counters: dict[str, int]


def snapshot(stores: list[Store], queue: ReadyQueue) -> list[SourceSnapshot]:
    return [
        SourceSnapshot(
            store.src.name, store.status(), queue.length(store.src.name), queue.stats(store.src.name)
        )
        for store in stores
    ]
