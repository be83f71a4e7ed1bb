"""dispatcher.Dispatcher and dispatcher.Sweeper with fake stores and a fakeredis ReadyQueue."""

from __future__ import annotations

import os
from typing import cast

import pytest
import redis

from duecast.dispatcher.dispatcher import Dispatcher
from duecast.dispatcher.sweeper import Sweeper
from duecast.shared.fanout.keys import Entry
from duecast.shared.fanout.queue import ReadyQueue
from duecast.shared.settings import DispatcherSettings, FaultSettings
from duecast.shared.storage.source_store import SourceStore
from tests.unit.fakes import FakeClaimStore, FakeSweepStore, rescan_source

POLL_S = 0.25
SETTINGS = DispatcherSettings(poll_interval_s=POLL_S, sweep_interval_s=5.0, sweep_batch=100)


def _dispatcher(
    stores: list[FakeClaimStore], queue: ReadyQueue, faults: FaultSettings | None = None
) -> Dispatcher:
    return Dispatcher(cast(list[SourceStore], stores), queue, SETTINGS, faults)


def _sweeper(stores: list[FakeSweepStore], queue: ReadyQueue) -> Sweeper:
    return Sweeper(cast(list[SourceStore], stores), queue, SETTINGS)


def _due(n: int, start: int = 1, attempt: int = 1) -> list[Entry]:
    return [Entry(i, attempt) for i in range(start, start + n)]


def _drain(queue: ReadyQueue, source: str) -> list[bytes]:
    popped = queue.pop([source], 100_000, 0.1)
    return [] if popped is None else popped[1]


# --- Dispatcher -------------------------------------------------------------------------------------


def test_entries_pushed_in_claim_order_with_attempts(ready_queue: ReadyQueue) -> None:
    store = FakeClaimStore(
        rescan_source(claim_batch=10, high_water=100), [Entry(9, 1), Entry(3, 2), Entry(7, 5)]
    )
    tick = _dispatcher([store], ready_queue).tick()
    assert _drain(ready_queue, "users") == [b"9:1", b"3:2", b"7:5"]
    assert store.limits == [10]
    assert tick.delay_s == POLL_S  # partial batch: nothing more is due right now
    assert tick.idle


def test_full_batch_claims_again_at_once(ready_queue: ReadyQueue) -> None:
    store = FakeClaimStore(rescan_source(claim_batch=10, high_water=100), _due(25))
    dispatcher = _dispatcher([store], ready_queue)
    ticks = [dispatcher.tick() for _ in range(3)]
    assert [(t.delay_s, t.idle) for t in ticks] == [(0.0, False), (0.0, False), (POLL_S, True)]
    assert _drain(ready_queue, "users") == [b"%d:1" % i for i in range(1, 26)]
    assert dispatcher.counts["users"] == 25
    assert ready_queue.stats("users") == {"claimed": 25}


def test_nothing_due_waits_a_poll(ready_queue: ReadyQueue) -> None:
    store = FakeClaimStore(rescan_source(), [])
    tick = _dispatcher([store], ready_queue).tick()
    assert (tick.delay_s, tick.idle) == (POLL_S, True)
    assert ready_queue.length("users") == 0
    assert ready_queue.stats("users") == {}


def test_list_at_high_water_claims_nothing(ready_queue: ReadyQueue) -> None:
    store = FakeClaimStore(rescan_source(claim_batch=5, high_water=20), _due(50, start=1000))
    ready_queue.push("users", _due(20))
    tick = _dispatcher([store], ready_queue).tick()
    assert store.limits == []  # not even asked: no rows become DISPATCHED without room in Redis
    assert ready_queue.length("users") == 20
    assert (tick.delay_s, tick.idle) == (POLL_S, True)


def test_list_above_high_water_claims_nothing(ready_queue: ReadyQueue) -> None:
    store = FakeClaimStore(rescan_source(claim_batch=5, high_water=20), _due(50, start=1000))
    ready_queue.push("users", _due(33))
    _dispatcher([store], ready_queue).tick()
    assert store.limits == []


def test_claims_only_up_to_high_water(ready_queue: ReadyQueue) -> None:
    store = FakeClaimStore(rescan_source(claim_batch=10, high_water=20), _due(50, start=1000))
    ready_queue.push("users", _due(17))
    dispatcher = _dispatcher([store], ready_queue)
    first = dispatcher.tick()
    assert store.limits == [3]
    assert ready_queue.length("users") == 20
    assert (first.delay_s, first.idle) == (0.0, False)  # the room was filled: look again at once
    second = dispatcher.tick()
    assert store.limits == [3]  # ...and then backpressure holds
    assert (second.delay_s, second.idle) == (POLL_S, True)


def test_workers_draining_the_list_reopens_room(ready_queue: ReadyQueue) -> None:
    store = FakeClaimStore(rescan_source(claim_batch=10, high_water=10), _due(30))
    dispatcher = _dispatcher([store], ready_queue)
    dispatcher.tick()
    dispatcher.tick()
    assert store.limits == [10]
    ready_queue.pop(["users"], 4, 0.1)
    dispatcher.tick()
    assert store.limits == [10, 4]
    assert ready_queue.length("users") == 10


def test_several_sources_take_the_shortest_delay(ready_queue: ReadyQueue) -> None:
    full = FakeClaimStore(rescan_source("users", claim_batch=5, high_water=100), _due(5))
    partial = FakeClaimStore(rescan_source("orders", claim_batch=5, high_water=100), _due(2, start=50))
    tick = _dispatcher([partial, full], ready_queue).tick()
    assert (tick.delay_s, tick.idle) == (0.0, False)
    assert _drain(ready_queue, "users") == [b"%d:1" % i for i in range(1, 6)]
    assert _drain(ready_queue, "orders") == [b"50:1", b"51:1"]
    assert (ready_queue.stats("users"), ready_queue.stats("orders")) == ({"claimed": 5}, {"claimed": 2})


def test_no_sources_is_idle(ready_queue: ReadyQueue) -> None:
    tick = _dispatcher([], ready_queue).tick()
    assert (tick.delay_s, tick.idle) == (POLL_S, True)


def test_crash_hook_exits_after_claim_and_before_push(
    ready_queue: ReadyQueue, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The claim is committed first; the push comes after. A crash in between loses no row."""

    class Exited(Exception):
        pass

    def fake_exit(code: int) -> None:
        raise Exited(code)

    monkeypatch.setattr(os, "_exit", fake_exit)
    store = FakeClaimStore(rescan_source(), _due(3))
    with pytest.raises(Exited):
        _dispatcher([store], ready_queue, FaultSettings(crash_after_commit=True)).tick()
    assert store.limits != []
    assert ready_queue.length("users") == 0


def test_crash_hook_does_nothing_when_nothing_was_claimed(
    ready_queue: ReadyQueue, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(os, "_exit", lambda code: pytest.fail("exited with nothing claimed"))
    tick = _dispatcher(
        [FakeClaimStore(rescan_source())], ready_queue, FaultSettings(crash_after_commit=True)
    ).tick()
    assert tick.idle


# --- Sweeper ----------------------------------------------------------------------------------------


def test_sweeper_passes_each_sources_timeout_and_the_batch(ready_queue: ReadyQueue) -> None:
    a = FakeSweepStore(rescan_source("users", visibility_timeout_s=30), 3)
    b = FakeSweepStore(rescan_source("orders", visibility_timeout_s=90))
    tick = _sweeper([a, b], ready_queue).tick()
    assert a.calls == [(30.0, 100)]
    assert b.calls == [(90.0, 100)]
    assert (tick.delay_s, tick.idle) == (5.0, True)


def test_sweeper_accumulates_counts_and_stats(ready_queue: ReadyQueue) -> None:
    a = FakeSweepStore(rescan_source("users"), 3)
    b = FakeSweepStore(rescan_source("orders"))
    sweeper = _sweeper([a, b], ready_queue)
    sweeper.tick()
    a.add_expired(4)  # more rows expire before the next sweep
    b.add_expired(2)
    sweeper.tick()
    assert sweeper.requeued == 9
    assert ready_queue.stats("users") == {"requeued": 7}
    assert ready_queue.stats("orders") == {"requeued": 2}


def test_sweeper_reports_a_full_batch(ready_queue: ReadyQueue) -> None:
    store = FakeSweepStore(rescan_source(), 199)
    sweeper = _sweeper([store], ready_queue)
    first, second = sweeper.tick(), sweeper.tick()
    assert (first.delay_s, first.idle) == (0.0, False)  # more may have expired: sweep again now
    assert (second.delay_s, second.idle) == (5.0, True)


def test_one_full_source_makes_the_whole_sweep_busy(ready_queue: ReadyQueue) -> None:
    stores = [FakeSweepStore(rescan_source("users"), 1), FakeSweepStore(rescan_source("orders"), 100)]
    assert not _sweeper(stores, ready_queue).tick().idle


def test_sweep_all_repeats_until_a_partial_batch(ready_queue: ReadyQueue) -> None:
    store = FakeSweepStore(rescan_source(), 312)
    sweeper = _sweeper([store], ready_queue)
    sweeper.sweep_all()
    assert len(store.calls) == 4
    assert sweeper.requeued == 312
    assert ready_queue.stats("users") == {"requeued": 312}


def test_sweeper_with_nothing_expired_writes_nothing(ready_queue: ReadyQueue) -> None:
    sweeper = _sweeper([FakeSweepStore(rescan_source())], ready_queue)
    sweeper.sweep_all()
    assert sweeper.requeued == 0
    assert ready_queue.stats("users") == {}


# --- Redis lost or down -------------------------------------------------------------------------------


def test_a_lost_epoch_canary_requeues_every_dispatched_row_at_once(ready_queue: ReadyQueue) -> None:
    store = FakeClaimStore(rescan_source(claim_batch=10, high_water=100), _due(5))
    dispatcher = _dispatcher([store], ready_queue)
    dispatcher.tick()  # first tick: sets the canary (nothing dispatched yet to recover)
    assert (store.requeued, len(store.dispatched)) == (0, 5)
    dispatcher.tick()
    assert store.requeued == 0  # canary present: Redis kept its data
    ready_queue.client.flushall()
    dispatcher.tick()
    assert store.requeued == 5  # every row whose entry went with the flush, without waiting
    assert dispatcher.counts["recovered"] == 5


def test_a_failed_push_releases_the_claimed_rows_and_fails_the_tick(ready_queue: ReadyQueue) -> None:
    store = FakeClaimStore(rescan_source(claim_batch=10, high_water=100), _due(3))
    dispatcher = _dispatcher([store], ready_queue)
    dispatcher.queue.data_lost()  # canary set: this test is about the push

    def refuse(source: str, entries: object) -> None:
        raise redis.ConnectionError("Redis is down")

    dispatcher.queue.push = refuse  # type: ignore[method-assign]
    with pytest.raises(redis.ConnectionError):
        dispatcher.tick()
    assert store.released == _due(3)
    assert store.dispatched == []
