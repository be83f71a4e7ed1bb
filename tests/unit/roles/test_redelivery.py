"""dispatcher.Redelivery with the fake store model, a fake worker registry, a fakeredis ReadyQueue
and a hand-moved clock: which cause runs when, what each asks its store, and what it counts.
Dead workers' holds and each cause's cadence are in test_redelivery_holds.py."""

from __future__ import annotations

import logging
from typing import cast

import pytest

from duecast.dispatcher.redelivery import SETTLE_PASSES, SETTLE_PAUSE_S, cadence
from duecast.shared.entries import Entry
from duecast.shared.fanout.queue import ReadyQueue
from duecast.shared.policy import CAUSES, Cause
from duecast.shared.settings import Settings
from duecast.shared.storage.source_store import Store
from tests.unit.fakes import FakeClaimStore, FakeStore, FakeSweepStore, FakeWorkStore, rescan_source
from tests.unit.roles.redelivery_support import (
    BATCH,
    POLL_S,
    SWEEP_S,
    Clock,
    _redelivery,
)

SWEEP: dict[Cause, float] = {"expired": SWEEP_S, "interrupted": SWEEP_S}


class LeasedFake(FakeSweepStore):
    """A leased kind's requeue_interrupted, answering a scripted count per call (then 0)."""

    def __init__(self, name: str, interrupted: list[int]) -> None:
        super().__init__(rescan_source(name))
        self.interrupted = list(interrupted)

    def requeue_interrupted(self, limit: int) -> int:
        self.asked.append("interrupted")
        return min(self.interrupted.pop(0), limit) if self.interrupted else 0


# --- the sweep: expired and interrupted -------------------------------------------------------------


def test_the_sweep_passes_each_sources_timeout_and_the_batch(ready_queue: ReadyQueue) -> None:
    a = FakeSweepStore(rescan_source("users", visibility_timeout_s=30), 3)
    b = FakeSweepStore(rescan_source("orders", visibility_timeout_s=90))
    tick = _redelivery([a, b], ready_queue, SWEEP).tick()
    assert (a.calls, a.asked) == ([(30.0, BATCH)], ["expired", "interrupted"])
    assert (b.calls, b.asked) == ([(90.0, BATCH)], ["expired", "interrupted"])
    assert len(a.dispatched) == 0
    assert (tick.delay_s, tick.idle) == (SWEEP_S, True)


def test_counts_and_stats_accumulate_by_cause(ready_queue: ReadyQueue) -> None:
    a = LeasedFake("users", interrupted=[1])
    a.add_expired(3)
    b = FakeSweepStore(rescan_source("orders"))
    clock = Clock()
    redelivery = _redelivery([a, b], ready_queue, SWEEP, clock=clock)
    redelivery.tick()
    a.add_expired(4)  # more rows expire before the next sweep
    b.add_expired(2)
    clock.now += SWEEP_S
    redelivery.tick()
    assert redelivery.counts == {"expired": 9, "interrupted": 1}
    assert ready_queue.stats("users") == {"requeued": 8}
    assert ready_queue.stats("orders") == {"requeued": 2}


def test_a_full_batch_runs_its_cause_again_at_once_and_only_it(ready_queue: ReadyQueue) -> None:
    store = FakeSweepStore(rescan_source(), 2 * BATCH - 1)
    redelivery = _redelivery([store], ready_queue, SWEEP)
    first, second = redelivery.tick(), redelivery.tick()
    assert (first.delay_s, first.idle) == (0.0, False)  # more may have expired: again now
    assert store.asked == ["expired", "interrupted", "expired"]  # the clock did not move
    assert (second.delay_s, second.idle) == (SWEEP_S, True)


def test_one_full_source_keeps_the_cause_busy(ready_queue: ReadyQueue) -> None:
    stores: list[FakeStore] = [
        FakeSweepStore(rescan_source("users"), 1),
        FakeSweepStore(rescan_source("orders"), BATCH),
    ]
    assert not _redelivery(stores, ready_queue, {"expired": SWEEP_S}).tick().idle


def test_drain_repeats_until_a_partial_batch(ready_queue: ReadyQueue) -> None:
    store = FakeSweepStore(rescan_source(), 3 * BATCH + 12)
    redelivery = _redelivery([store], ready_queue, {"expired": SWEEP_S})
    pauses: list[float] = []
    redelivery.drain(sleep=pauses.append)
    # Four passes until one was partial, then the settle passes for rows skipped as locked.
    assert store.asked == ["expired"] * (4 + SETTLE_PASSES)
    assert pauses == [SETTLE_PAUSE_S] * SETTLE_PASSES
    assert redelivery.counts["expired"] == 312
    assert ready_queue.stats("users") == {"requeued": 312}
    assert store.dispatched == []


def test_nothing_to_requeue_writes_nothing(ready_queue: ReadyQueue) -> None:
    redelivery = _redelivery([FakeSweepStore(rescan_source())], ready_queue, {"expired": SWEEP_S})
    redelivery.drain(sleep=lambda _: None)
    assert redelivery.counts == {}
    assert ready_queue.stats("users") == {}


def test_the_sweep_log_line_and_event_are_the_sweepers(
    ready_queue: ReadyQueue, caplog: pytest.LogCaptureFixture
) -> None:
    store = FakeSweepStore(rescan_source("users", visibility_timeout_s=60), 12)
    with caplog.at_level(logging.WARNING, "duecast.redelivery"):
        _redelivery([store], ready_queue, {"expired": SWEEP_S}).tick()
    (record,) = caplog.records
    assert record.getMessage() == "requeued 12 rows of users not acked within 60s"
    assert (record.event, record.source, record.count) == ("sweeper.requeued", "users", 12)  # type: ignore[attr-defined]


# --- lost: the epoch canary -------------------------------------------------------------------------


def test_a_lost_epoch_canary_requeues_every_unstarted_row_at_once(ready_queue: ReadyQueue) -> None:
    store = FakeWorkStore(rescan_source(), {})
    clock = Clock()
    redelivery = _redelivery([store], ready_queue, {"lost": POLL_S}, clock=clock)
    redelivery.tick()  # first use: no canary yet, so whatever is dispatched goes back (nothing)
    assert (store.asked, store.requeued) == (["lost"], 0)
    store.add_dispatched({i: 1 for i in range(1, 6)})
    for _ in range(SETTLE_PASSES):  # passes over what was dispatched before the loss: not these
        clock.now += POLL_S
        redelivery.tick()
    assert (store.asked, store.requeued) == (["lost"] * (1 + SETTLE_PASSES), 0)
    clock.now += POLL_S
    redelivery.tick()
    assert store.asked == ["lost"] * (1 + SETTLE_PASSES)  # canary present: Redis kept its data
    ready_queue.client.flushall()
    clock.now += POLL_S
    tick = redelivery.tick()
    assert store.requeued == 5  # every row whose entry went with the flush, without waiting
    assert store.dispatched == []
    assert redelivery.counts["lost"] == 5
    assert ready_queue.stats("users") == {"requeued": 5}
    assert (tick.delay_s, tick.idle) == (POLL_S, True)


def test_a_row_a_worker_started_is_not_taken_for_lost(ready_queue: ReadyQueue) -> None:
    """Its worker holds it by its lease, entry or not: only a lease that ran out sends it back."""
    store = FakeWorkStore(rescan_source(), {1: 1, 2: 1})
    with store.started([Entry(1, 1)]):
        assert _redelivery([store], ready_queue, {"lost": POLL_S}).requeue("lost") == 1
    assert (store.started_rows, store.dispatched) == ([Entry(1, 1)], [])


def test_a_full_batch_of_lost_rows_goes_on_without_asking_the_canary_again(ready_queue: ReadyQueue) -> None:
    store = FakeWorkStore(rescan_source(), {i: 1 for i in range(1, 2 * BATCH + 8)})
    redelivery = _redelivery([store], ready_queue, {"lost": POLL_S})
    redelivery.drain(sleep=lambda _: None)  # the canary answers "lost" once: the backlog carries the rest
    assert store.asked == ["lost"] * (3 + SETTLE_PASSES)  # then the settle passes
    assert redelivery.counts["lost"] == 2 * BATCH + 7


def test_the_canary_alone_shares_the_stores_and_the_tally(ready_queue: ReadyQueue) -> None:
    store = FakeWorkStore(rescan_source(), {1: 1, 2: 3})
    redelivery = _redelivery([store], ready_queue)
    redelivery.canary().drain(sleep=lambda _: None)
    assert store.asked == ["lost"] * (1 + SETTLE_PASSES)  # nothing else, even as the leader
    assert redelivery.counts == {"lost": 2}


def test_release_unpushed_gives_the_claim_back_on_the_callers_store(
    ready_queue: ReadyQueue, caplog: pytest.LogCaptureFixture
) -> None:
    claimed = [Entry(1, 1), Entry(2, 4)]
    store = FakeClaimStore(rescan_source(), claimed)
    assert store.claim_due(10) == claimed
    redelivery = _redelivery([], ready_queue)
    with caplog.at_level(logging.WARNING, "duecast.redelivery"):
        assert redelivery.release_unpushed(cast(Store, store), claimed) == 2
    assert (store.released, store.dispatched) == (claimed, [])
    assert caplog.messages == ["push to Redis failed; released 2 claimed rows of users"]
    assert redelivery.counts == {}  # counted by no tick: it runs in the dispatcher's thread


# --- interrupted: started rows whose lease ran out ----------------------------------------------------


def test_a_dead_workers_started_rows_come_back_as_interrupted_once_their_lease_ran_out(
    ready_queue: ReadyQueue,
) -> None:
    store = FakeWorkStore(rescan_source(), {1: 1, 2: 1})
    with store.started([Entry(1, 1), Entry(2, 1)]):
        pass  # its worker dies: nothing acked, and nobody renews the leases
    redelivery = _redelivery([store], ready_queue, SWEEP)
    assert redelivery.requeue("expired") + redelivery.requeue("interrupted") == 0  # leased still
    store.backdate([1], store.src.lease_s + 1)
    assert redelivery.requeue("expired") == 0  # not the visibility timeout's: the row was started
    assert redelivery.requeue("interrupted") == 1
    assert redelivery.counts == {"interrupted": 1}
    assert store.claim_due(10) == [Entry(1, 2)]  # due at once, under a new attempt
    assert store.started_rows == [Entry(2, 1)]


def test_interrupted_runs_often_enough_to_bring_a_dead_workers_rows_back_within_the_lease() -> None:
    settings = Settings(
        sources=[rescan_source("users"), rescan_source("orders", lease_s=30)],
        dispatcher={"sweep_interval_s": 5},  # type: ignore[arg-type]
    )
    every = cadence(settings, CAUSES)
    assert (every["expired"], every["interrupted"]) == (5.0, 1.5)  # a tenth of the shortest lease, 15 s
