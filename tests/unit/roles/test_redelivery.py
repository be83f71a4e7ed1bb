"""dispatcher.Redelivery with the fake store model, a fake worker registry, a fakeredis ReadyQueue
and a hand-moved clock: which cause runs when, what each asks its store, and what it counts."""

from __future__ import annotations

import logging
from typing import cast

import pytest

from duecast.dispatcher.redelivery import Redelivery
from duecast.shared.fanout.keys import Entry, encode_entry
from duecast.shared.fanout.queue import ReadyQueue
from duecast.shared.policy import Cause
from duecast.shared.storage.source_store import Store
from duecast.shared.storage.worker_registry import WorkerRegistry
from tests.unit.fakes import FakeClaimStore, FakeStore, FakeSweepStore, FakeWorkStore, rescan_source

BATCH = 100
SWEEP_S, POLL_S, HEARTBEAT_S = 5.0, 0.25, 1.0
EVERY: dict[Cause, float] = {"lost": POLL_S, "expired": SWEEP_S, "interrupted": SWEEP_S, "held": HEARTBEAT_S}
SWEEP: dict[Cause, float] = {"expired": SWEEP_S, "interrupted": SWEEP_S}


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class FakeRegistry:
    """Stands in for WorkerRegistry.dead/deregister: `dead` lists the silent workers."""

    def __init__(self, dead: list[str] | None = None) -> None:
        self.silent = list(dead or [])
        self.deregistered: list[str] = []
        self.asked = 0  # dead() calls

    def dead(self) -> list[str]:
        self.asked += 1
        return list(self.silent)

    def deregister(self, name: str) -> None:
        self.deregistered.append(name)
        self.silent.remove(name)


class LeasedFake(FakeSweepStore):
    """A leased kind's requeue_interrupted, answering a scripted count per call (then 0)."""

    def __init__(self, name: str, interrupted: list[int]) -> None:
        super().__init__(rescan_source(name))
        self.interrupted = list(interrupted)

    def requeue_interrupted(self, limit: int) -> int:
        self.asked.append("interrupted")
        return min(self.interrupted.pop(0), limit) if self.interrupted else 0


def _redelivery(
    stores: list[FakeStore],
    queue: ReadyQueue,
    every: dict[Cause, float] | None = None,
    *,
    registry: FakeRegistry | None = None,
    leads: bool = True,
    clock: Clock | None = None,
) -> Redelivery:
    return Redelivery(
        cast(list[Store], stores),
        queue,
        EVERY if every is None else every,
        BATCH,
        registry=cast(WorkerRegistry, registry or FakeRegistry()),
        leads=lambda: leads,
        clock=clock or Clock(),
    )


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
    redelivery.drain()
    assert store.asked == ["expired"] * 4
    assert redelivery.counts["expired"] == 312
    assert ready_queue.stats("users") == {"requeued": 312}
    assert store.dispatched == []


def test_nothing_to_requeue_writes_nothing(ready_queue: ReadyQueue) -> None:
    redelivery = _redelivery([FakeSweepStore(rescan_source())], ready_queue, {"expired": SWEEP_S})
    redelivery.drain()
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
    clock.now += POLL_S
    redelivery.tick()
    assert store.asked == ["lost"]  # canary present: Redis kept its data
    ready_queue.client.flushall()
    clock.now += POLL_S
    tick = redelivery.tick()
    assert store.requeued == 5  # every row whose entry went with the flush, without waiting
    assert store.dispatched == []
    assert redelivery.counts["lost"] == 5
    assert ready_queue.stats("users") == {"requeued": 5}
    assert (tick.delay_s, tick.idle) == (POLL_S, True)


def test_a_row_a_worker_holds_is_not_taken_for_lost(ready_queue: ReadyQueue) -> None:
    store = FakeWorkStore(rescan_source(), {1: 1, 2: 1})
    with store.started([Entry(1, 1)]):
        assert _redelivery([store], ready_queue, {"lost": POLL_S}).requeue("lost") == 1
    assert store.dispatched == [Entry(1, 1)]


def test_a_full_batch_of_lost_rows_goes_on_without_asking_the_canary_again(ready_queue: ReadyQueue) -> None:
    store = FakeWorkStore(rescan_source(), {i: 1 for i in range(1, 2 * BATCH + 8)})
    redelivery = _redelivery([store], ready_queue, {"lost": POLL_S})
    redelivery.drain()  # the canary answers "lost" once only: the backlog carries the rest
    assert store.asked == ["lost"] * 3
    assert redelivery.counts["lost"] == 2 * BATCH + 7


def test_the_canary_alone_shares_the_stores_and_the_tally(ready_queue: ReadyQueue) -> None:
    store = FakeWorkStore(rescan_source(), {1: 1, 2: 3})
    redelivery = _redelivery([store], ready_queue)
    redelivery.canary().drain()
    assert store.asked == ["lost"]  # nothing else, even as the leader
    assert redelivery.counts == {"lost": 2}


# --- held: the batches of dead workers ---------------------------------------------------------------


def _hold(queue: ReadyQueue, worker: str, source: str, raws: list[bytes]) -> None:
    """What ReadyQueue.pop_held records (its Lua script runs on real Redis only: test_pop_held.py)."""
    queue.client.set(queue.keys.inflight(worker), source.encode() + b"\n" + b" ".join(raws))


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
    # The canary asks the store nothing while Redis keeps its data: it answered "lost" once, first.
    assert ran[0] == ["lost", "expired", "interrupted", "held"]
    assert [i for i, causes in enumerate(ran) if "lost" in causes] == [0]
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
