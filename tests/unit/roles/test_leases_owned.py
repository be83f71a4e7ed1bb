"""Units the worker's own ack transaction holds locked count as kept by its lease keeper (issue 24,
item 9), and only while that transaction lasts: rolled back, the keeper's confirmation goes back to
what a real renewal proved. Fake `extend` and recorded `stop`, as in test_leases.py."""

from __future__ import annotations

import time
from collections.abc import Sequence

from duecast.shared.entries import Entry
from duecast.shared.storage.db import Database
from duecast.shared.storage.leased.keeper import EXIT_FENCED, Extended
from tests.unit.roles.test_leases import ENTRIES, LEASE_S, keeper


def first_locked(_db: Database, entries: Sequence[Entry]) -> Extended:
    """Every renewal finds entry 1 locked by a session (the worker's own ack): neither kept nor lost."""
    return Extended(frozenset(e.id for e in entries[1:]), frozenset())


def test_a_unit_the_workers_own_ack_holds_counts_as_kept() -> None:
    keep, stops = keeper(first_locked)
    with keep.holding(ENTRIES, time.monotonic()) as hold:
        hold.own([ENTRIES[0].id])  # its ack locked it and runs a slow transactional task
        assert not stops.done.wait(3 * LEASE_S)
        hold.disown(time.monotonic())  # committed, having extended its lease
        hold.finishing([ENTRIES[0].id])
        assert not stops.done.wait(LEASE_S)


def test_an_ack_that_rolls_back_takes_the_confirmations_it_lent_back() -> None:
    keep, stops = keeper(first_locked)
    since = time.monotonic()
    with keep.holding(ENTRIES, since) as hold:
        hold.own([ENTRIES[0].id])
        assert not stops.done.wait(2 * LEASE_S)  # past the fence, but no other session can take it
        hold.disown(None)  # rolled back: its lease is as the last real renewal left it, long ago
        assert stops.done.wait(2)
    ((code, _),) = stops.codes
    assert code == EXIT_FENCED
