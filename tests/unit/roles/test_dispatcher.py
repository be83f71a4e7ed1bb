"""dispatcher.Dispatcher with fake stores and a fakeredis ReadyQueue."""

from __future__ import annotations

from typing import cast

import pytest
import redis

from duecast.dispatcher.dispatcher import Dispatcher
from duecast.dispatcher.redelivery import Redelivery
from duecast.shared.entries import Entry
from duecast.shared.fanout.protocol import QueueUnavailable
from duecast.shared.fanout.queue import ReadyQueue
from duecast.shared.pace import PACE_TICK_S, paced_delay_s
from duecast.shared.settings import DispatcherSettings
from duecast.shared.storage.source_store import Store
from tests.unit.fakes import FakeClaimStore, rescan_source

POLL_S = 0.25
SETTINGS = DispatcherSettings(poll_interval_s=POLL_S, sweep_interval_s=5.0, sweep_batch=100)
CLOCK_S = 1000.0  # the wall clock, fixed: a caught-up re-scan's next claim is on the pace's grid
PACED_S = paced_delay_s(CLOCK_S, PACE_TICK_S)  # 0.02: 20 ms into the grid's next step


def _dispatcher(stores: list[FakeClaimStore], queue: ReadyQueue) -> Dispatcher:
    redelivery = Redelivery([], queue, {"lost": POLL_S}, SETTINGS.sweep_batch)
    dispatcher = Dispatcher(cast(list[Store], stores), queue, SETTINGS, redelivery)
    dispatcher.clock = lambda: CLOCK_S
    return dispatcher


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
    assert tick.delay_s == PACED_S  # partial batch: nothing more is due until the grid's next step
    assert tick.idle


def test_full_batch_claims_again_at_once(ready_queue: ReadyQueue) -> None:
    store = FakeClaimStore(rescan_source(claim_batch=10, high_water=100), _due(25))
    dispatcher = _dispatcher([store], ready_queue)
    ticks = [dispatcher.tick() for _ in range(3)]
    assert [(t.delay_s, t.idle) for t in ticks] == [(0.0, False), (0.0, False), (PACED_S, True)]
    assert _drain(ready_queue, "users") == [b"%d:1" % i for i in range(1, 26)]
    assert dispatcher.counts["users"] == 25
    assert ready_queue.stats("users") == {"claimed": 25}


def test_nothing_due_waits_for_the_pace_grid_or_a_poll(ready_queue: ReadyQueue) -> None:
    store = FakeClaimStore(rescan_source(), [])
    tick = _dispatcher([store], ready_queue).tick()
    assert (tick.delay_s, tick.idle) == (PACED_S, True)
    oneoff = FakeClaimStore(rescan_source(period_s=0, on_success="delete"), [])
    tick = _dispatcher([oneoff], ready_queue).tick()
    assert (tick.delay_s, tick.idle) == (POLL_S, True)  # a one-off source has no pace
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


def test_the_claim_is_made_before_the_push(ready_queue: ReadyQueue) -> None:
    """Claim (committed, in a real store), then push: a process that dies in between leaves rows
    DISPATCHED with no entry, never an entry for an uncommitted claim (tests/faults kills one there)."""

    class Died(BaseException):
        pass

    store = FakeClaimStore(rescan_source(), _due(3))
    claimed_at_push: list[list[Entry]] = []

    def die(source: str, entries: object) -> None:
        claimed_at_push.append(list(store.dispatched))
        raise Died

    dispatcher = _dispatcher([store], ready_queue)
    dispatcher.queue.push = die  # type: ignore[method-assign]
    with pytest.raises(Died):
        dispatcher.tick()
    assert claimed_at_push == [_due(3)]
    assert store.released == []  # not a refusal from Redis: nothing is given back
    assert ready_queue.length("users") == 0


# --- Redis down ------------------------------------------------------------------------------------


def test_a_failed_push_releases_the_claimed_rows_and_fails_the_tick(ready_queue: ReadyQueue) -> None:
    store = FakeClaimStore(rescan_source(claim_batch=10, high_water=100), _due(3))
    dispatcher = _dispatcher([store], ready_queue)

    def refuse(source: str, entries: object) -> None:
        # What the port raises for redis-py's ConnectionError (shared/fanout/client.py: translate).
        raise QueueUnavailable("ConnectionError: Redis is down") from redis.ConnectionError("Redis is down")

    dispatcher.queue.push = refuse  # type: ignore[method-assign]
    with pytest.raises(QueueUnavailable):
        dispatcher.tick()
    assert store.released == _due(3)
    assert store.dispatched == []


def test_a_counter_pushed_to_its_limit_does_not_fail_the_claim(ready_queue: ReadyQueue) -> None:
    # HINCRBY {prefix}:stats:users claimed 9223372036854775807: allowed by the documented ACL.
    ready_queue.client.hincrby(ready_queue.keys.stats("users"), "claimed", 2**63 - 1)
    store = FakeClaimStore(rescan_source(claim_batch=10, high_water=100), _due(3))
    dispatcher = _dispatcher([store], ready_queue)
    assert [dispatcher.tick().idle for _ in range(2)] == [True, True]  # no tick raised
    assert _drain(ready_queue, "users") == [b"1:1", b"2:1", b"3:1"]
    assert ready_queue.stats("users") == {"claimed": 3}


# --- pauses ----------------------------------------------------------------------------------------


def test_a_paused_source_claims_nothing_until_resumed(ready_queue: ReadyQueue) -> None:
    store = FakeClaimStore(rescan_source(claim_batch=10, high_water=100), _due(5))
    paused = {"users"}
    redelivery = Redelivery([], ready_queue, {"lost": POLL_S}, SETTINGS.sweep_batch)
    dispatcher = Dispatcher(
        cast(list[Store], [store]), ready_queue, SETTINGS, redelivery, paused=lambda: paused
    )
    tick = dispatcher.tick()
    assert store.limits == []  # not even asked
    assert (tick.delay_s, tick.idle) == (POLL_S, True)
    assert _drain(ready_queue, "users") == []
    paused.clear()
    dispatcher.tick()
    assert _drain(ready_queue, "users") == [b"%d:1" % i for i in range(1, 6)]
