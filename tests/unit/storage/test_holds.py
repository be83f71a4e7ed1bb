"""shared/storage/holds.py: the one hold requeue that redelivery's "held" cause and the supervisor's
hand-back both run (their own policies: tests/unit/roles/test_redelivery_holds.py, test_supervisor.py)."""

from __future__ import annotations

import pytest

from duecast.shared.entries import BadHold, Entry, encode_entry
from duecast.shared.fanout.queue import ReadyQueue
from duecast.shared.storage.holds import Requeued, hold_entries, requeue_hold
from tests.unit.fakes import FakeWorkStore, rescan_source


def _hold(queue: ReadyQueue, worker: str, source: str, raws: list[bytes]) -> None:
    queue.client.set(queue.keys.inflight(worker), source.encode() + b"\n" + b" ".join(raws))


def test_a_hold_is_requeued_fenced_on_its_attempts_and_counted(ready_queue: ReadyQueue) -> None:
    users = FakeWorkStore(rescan_source("users"), {1: 2, 3: 1, 5: 4})  # 5 was claimed again since
    _hold(ready_queue, "dead", "users", [encode_entry(1, 2), encode_entry(3, 1), encode_entry(5, 3)])
    assert requeue_hold(ready_queue, "dead", {"users": users}.get) == Requeued("users", 2)
    assert users.dispatched == [Entry(5, 4)]
    assert ready_queue.stats("users") == {"requeued": 2}
    assert ready_queue.held_by("dead") is not None  # forgetting the hold is the caller's


def test_no_hold_or_a_source_not_served_touches_no_store(ready_queue: ReadyQueue) -> None:
    users = FakeWorkStore(rescan_source("users"), {1: 1})
    _hold(ready_queue, "w1", "orders", [encode_entry(1, 1)])
    assert requeue_hold(ready_queue, "w1", {"users": users}.get) is None
    assert requeue_hold(ready_queue, "w2", {"users": users}.get) is None
    assert users.asked == []


def test_entries_that_do_not_parse_are_skipped(ready_queue: ReadyQueue) -> None:
    assert hold_entries([b"not-an-entry", encode_entry(7, 2), b"1:x"]) == [Entry(7, 2)]
    users = FakeWorkStore(rescan_source("users"), {1: 1})
    _hold(ready_queue, "w", "users", [b"not-an-entry"])
    assert requeue_hold(ready_queue, "w", {"users": users}.get) == Requeued("users", 0)
    assert users.asked == []  # nothing parsed: no statement
    assert ready_queue.stats("users") == {}


def test_a_record_that_does_not_parse_is_the_callers_to_handle(ready_queue: ReadyQueue) -> None:
    ready_queue.client.set(ready_queue.keys.inflight("w"), b"\xff\xfe\xfd" * 20)
    with pytest.raises(BadHold):
        requeue_hold(ready_queue, "w", {}.get)
