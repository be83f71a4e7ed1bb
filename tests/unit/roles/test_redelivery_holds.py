"""Redelivery of rows a dead worker held, quarantine of unparsable holds, and each cause's cadence."""

from __future__ import annotations

import logging

import pytest

from duecast.dispatcher.redelivery import SETTLE_PASSES, Redelivery
from duecast.shared.entries import Entry, encode_entry
from duecast.shared.fanout.queue import ReadyQueue
from tests.unit.fakes import FakeSweepStore, FakeWorkStore, rescan_source
from tests.unit.roles.redelivery_support import (
    BATCH,
    HEARTBEAT_S,
    POLL_S,
    Clock,
    FakeRegistry,
    _redelivery,
)

# --- held: the batches of dead workers ---------------------------------------------------------------


def _hold(queue: ReadyQueue, worker: str, source: str, raws: list[bytes]) -> None:
    """What ReadyQueue.pop_held records: a list, the source name first."""
    queue.client.rpush(queue.keys.inflight(worker), source.encode(), *raws)


def test_a_dead_workers_hold_is_requeued_and_the_worker_forgotten(ready_queue: ReadyQueue) -> None:
    users = FakeWorkStore(rescan_source("users"), {1: 2, 3: 1, 5: 1})
    _hold(ready_queue, "dead", "users", [encode_entry(1, 2), encode_entry(3, 1)])
    _hold(ready_queue, "live", "users", [encode_entry(5, 1)])
    registry = FakeRegistry(["dead"])
    redelivery = _redelivery([users], ready_queue, {"held": HEARTBEAT_S}, registry=registry)
    assert redelivery.requeue("held") == 2
    assert users.dispatched == [Entry(5, 1)]  # the live worker's row is still its own
    assert registry.deregistered == ["dead"]
    assert ready_queue.held_by("dead") is None
    assert ready_queue.held_by("live") is not None
    assert ready_queue.stats("users") == {"requeued": 2}
    assert redelivery.requeue("held") == 0  # forgotten once requeued


def test_a_hold_is_fenced_on_the_attempt_it_held(ready_queue: ReadyQueue) -> None:
    users = FakeWorkStore(rescan_source("users"), {1: 3})  # requeued and claimed again since
    _hold(ready_queue, "dead", "users", [encode_entry(1, 2)])
    redelivery = _redelivery([users], ready_queue, {"held": HEARTBEAT_S}, registry=FakeRegistry(["dead"]))
    assert redelivery.requeue("held") == 0
    assert users.dispatched == [Entry(1, 3)]


def test_a_hold_of_another_source_or_of_garbage_is_dropped_without_sql(ready_queue: ReadyQueue) -> None:
    users = FakeWorkStore(rescan_source("users"), {1: 1})
    _hold(ready_queue, "w1", "orders", [encode_entry(1, 1)])  # a source this dispatcher does not serve
    _hold(ready_queue, "w2", "users", [b"not-an-entry"])
    registry = FakeRegistry(["w1", "w2"])
    assert _redelivery([users], ready_queue, {"held": HEARTBEAT_S}, registry=registry).requeue("held") == 0
    assert users.asked == []
    assert registry.deregistered == ["w1", "w2"]
    assert (ready_queue.held_by("w1"), ready_queue.held_by("w2")) == (None, None)


@pytest.mark.parametrize(
    ("record", "reason"),
    [
        (b"\xff\xfe\xfd" * 20, "no_source_line"),  # the bytes: no source line at all
        (b"\xff\xfeusers\n1:1 3:1", "bad_source"),  # a source line that is not a source's name
        (b"users 1:1 3:1", "no_source_line"),
        (b"\n1:1 3:1", "bad_source"),
    ],
)
def test_a_hold_that_does_not_parse_is_quarantined_and_every_other_dead_worker_requeued(
    ready_queue: ReadyQueue, record: bytes, reason: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 16.2: one corrupt record stopped the look for dead workers at that record, every tick,
    so the workers after it (in name order) waited out the visibility timeout."""
    users = FakeWorkStore(rescan_source("users"), {1: 1, 3: 1, 5: 1, 7: 1})
    ready_queue.client.set(ready_queue.keys.inflight("a-corrupt"), record)  # the first one asked about
    _hold(ready_queue, "b-dead", "users", [encode_entry(5, 1)])
    _hold(ready_queue, "c-dead", "users", [encode_entry(7, 1)])
    registry = FakeRegistry(["a-corrupt", "b-dead", "c-dead"])
    redelivery = _redelivery([users], ready_queue, {"held": HEARTBEAT_S}, registry=registry)
    with caplog.at_level(logging.WARNING, logger="duecast.redelivery"):
        assert redelivery.requeue("held") == 2
    assert users.dispatched == [Entry(1, 1), Entry(3, 1)]  # the corrupt one's rows: the visibility timeout's
    assert registry.deregistered == ["a-corrupt", "b-dead", "c-dead"]
    assert ready_queue.client.exists(*(ready_queue.keys.inflight(w) for w in registry.deregistered)) == 0
    assert ready_queue.quarantined("-") == [f"hold:a-corrupt:{reason} ".encode() + record]
    assert ready_queue.stats("-") == {"bad_holds": 1}
    assert ready_queue.stats("users") == {"requeued": 2}
    (said,) = [r for r in caplog.records if getattr(r, "event", "") == "redelivery.bad_hold"]
    assert "worker a-corrupt" in said.getMessage()
    assert reason in said.getMessage()


def test_a_hold_of_100_kb_is_quarantined_as_its_first_bytes(ready_queue: ReadyQueue) -> None:
    ready_queue.client.set(ready_queue.keys.inflight("w"), b"\xff" * 100_000)
    redelivery = _redelivery([], ready_queue, {"held": HEARTBEAT_S}, registry=FakeRegistry(["w"]))
    assert redelivery.requeue("held") == 0
    (kept,) = ready_queue.quarantined("-")
    assert kept == b"hold:w:no_source_line " + b"\xff" * 256


def test_held_needs_the_registry(ready_queue: ReadyQueue) -> None:
    with pytest.raises(ValueError, match="registry"):
        Redelivery([], ready_queue, {"held": HEARTBEAT_S}, BATCH)


# --- when each cause runs ------------------------------------------------------------------------------


def test_each_cause_runs_on_its_own_cadence(ready_queue: ReadyQueue) -> None:
    store = FakeSweepStore(rescan_source())
    registry = FakeRegistry()
    clock = Clock()
    redelivery = _redelivery([store], ready_queue, registry=registry, clock=clock)
    ran: list[list[str]] = []
    for _ in range(21):  # 5 s in steps of a poll
        store.asked.clear()
        asked = registry.asked
        tick = redelivery.tick()
        ran.append(store.asked + ["held"] * (registry.asked - asked))
        assert tick.delay_s == pytest.approx(POLL_S)
        clock.now += POLL_S
    # The canary asks the store nothing while Redis keeps its data: it answered "lost" once, first
    # (then SETTLE_PASSES runs take what a claim's lock may have hidden from that one).
    assert ran[0] == ["lost", "expired", "interrupted", "held"]
    assert [i for i, causes in enumerate(ran) if "lost" in causes] == list(range(1 + SETTLE_PASSES))
    assert [i for i, causes in enumerate(ran) if "held" in causes] == [0, 4, 8, 12, 16, 20]  # every heartbeat
    assert [i for i, causes in enumerate(ran) if "expired" in causes] == [0, 20]  # every sweep
    assert all(causes.count("interrupted") == causes.count("expired") for causes in ran)


def test_a_standby_runs_only_the_canary_and_looks_again_after_a_poll(ready_queue: ReadyQueue) -> None:
    store = FakeSweepStore(rescan_source(), BATCH)
    registry = FakeRegistry(["dead"])
    assert ready_queue.data_lost()  # the canary is set: Redis has lost nothing since
    tick = _redelivery([store], ready_queue, registry=registry, leads=False).tick()
    assert store.asked == []  # only the canary was asked: no SQL
    assert registry.asked == 0
    assert len(store.dispatched) == BATCH  # expired, but not the standby's to sweep
    assert (tick.delay_s, tick.idle) == (POLL_S, True)
