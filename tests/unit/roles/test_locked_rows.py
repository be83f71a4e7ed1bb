"""dispatcher.locked.LockedRows: only rows passed over at every claim for held_s are counted and logged."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import cast

import pytest

from duecast.dispatcher.locked import LockedRows
from duecast.shared.fanout.protocol import Queue
from duecast.shared.storage.source_store import Store


@dataclass
class Src:
    name: str = "users"


@dataclass
class ClaimedStore:
    """What a claim leaves for the report: which due rows it passed over as locked."""

    skipped_ids: frozenset[int] | None = None
    src: Src = field(default_factory=Src)
    rows_per_entry: int = 1


class Stats:
    def __init__(self) -> None:
        self.added: list[int] = []

    def add_stats(self, source: str, counts: dict[str, int]) -> None:
        self.added.append(counts["locked_skipped"])


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def report(locked: LockedRows, store: ClaimedStore, skipped: set[int] | None, at: float) -> int:
    cast(Clock, locked.clock).now = at
    store.skipped_ids = None if skipped is None else frozenset(skipped)
    return locked.report(cast(Store, store))


def test_only_rows_passed_over_at_every_claim_for_held_s_count(caplog: pytest.LogCaptureFixture) -> None:
    stats, store = Stats(), ClaimedStore()
    locked = LockedRows(cast(Queue, stats), held_s=2.0, clock=Clock())
    with caplog.at_level(logging.WARNING, "duecast.dispatcher"):
        assert report(locked, store, {1, 2, 3}, 100.0) == 0  # first seen: could be anyone's, briefly
        assert report(locked, store, {2, 3, 4}, 101.0) == 0  # 1 was claimed: a passing lock
        assert report(locked, store, None, 101.5) == 0  # a full claim did not look: nothing forgotten
        assert report(locked, store, {2, 3, 4}, 102.0) == 2  # 2 and 3, held since 100
        assert report(locked, store, {3, 4}, 103.5) == 2  # 3 (since 100) and 4 (since 101)
        assert report(locked, store, {2}, 104.0) == 0  # 2 came back: seen again from now
    assert stats.added == [2, 2]
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 1  # one line per source per LOG_EVERY_S
    assert said[0].startswith("2 due rows of users held by another session's lock for over 2s")


def test_duecast_s_own_churn_of_locked_rows_is_never_reported(caplog: pytest.LogCaptureFixture) -> None:
    """Another dispatcher's claims and acks committing between a claim and its count lock a few due
    rows at many claims, never the same row for long: before, each was a warning every 30 s."""
    stats, store = Stats(), ClaimedStore()
    locked = LockedRows(cast(Queue, stats), held_s=2.0, clock=Clock())
    with caplog.at_level(logging.WARNING, "duecast.dispatcher"):
        for i in range(1000):  # a claim every 0.1 s for 100 s, each passing over rows just claimed
            assert report(locked, store, {2 * i, 2 * i + 1}, 100.0 + i / 10) == 0
    assert stats.added == []
    assert caplog.records == []
