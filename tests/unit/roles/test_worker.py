"""worker.Worker.tick with a fake store and a fakeredis queue: what gets started, acked, counted and
quarantined. A tick pops and starts a batch; later ticks ack outcomes as they come (`drain`)."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import cast

import fakeredis
import pytest

from duecast.shared.acks import Ack, Row
from duecast.shared.api.handlers import Handler
from duecast.shared.entries import Entry
from duecast.shared.fanout.keys import Keys
from duecast.shared.fanout.queue import ReadyQueue
from duecast.shared.settings import WorkerSettings
from duecast.shared.storage.source_store import AckCounts, SourceStore
from duecast.shared.storage.units import StorageError, TransientError
from duecast.worker.worker import Worker
from tests.unit.fakes import FakeBatch, FakeWorkStore, rescan_source

SETTINGS = WorkerSettings(pop_batch=100, block_timeout_s=0.1)


def _worker(store: FakeWorkStore, handler: Handler, queue: ReadyQueue, **kwargs: object) -> Worker:
    stores = cast(dict[str, SourceStore], {store.src.name: store})
    return Worker(stores, {store.src.name: handler}, queue, SETTINGS, **kwargs)  # type: ignore[arg-type]


def drain(worker: Worker, timeout_s: float = 10.0) -> None:
    """Tick until a tick finds nothing in flight and nothing to pop (as --drain does), then close."""
    deadline = time.monotonic() + timeout_s
    try:
        while not worker.tick().idle:
            assert time.monotonic() < deadline, f"still in flight: {[f.describe() for f in worker.flights]}"
    finally:
        worker.close()


def _acked_ids(store: FakeWorkStore) -> list[int]:
    return [row["user_id"] for row, _ in store.acked]


def test_empty_lists_make_an_idle_tick(ready_queue: ReadyQueue) -> None:
    store = FakeWorkStore(rescan_source(), {})
    tick = _worker(store, Handler("users", lambda row: None, batch=False), ready_queue).tick()
    assert (tick.delay_s, tick.idle) == (0.0, True)  # BLMPOP already waited; no extra sleep
    assert store.started_with == []


def test_good_entries_are_handled_and_acked(ready_queue: ReadyQueue) -> None:
    store = FakeWorkStore(rescan_source(), {1: 1, 2: 3, 3: 1})
    seen: list[Row] = []
    handler = Handler("users", seen.append, batch=False, columns=("status",))
    ready_queue.push("users", [Entry(1, 1), Entry(2, 3), Entry(3, 1)])
    worker = _worker(store, handler, ready_queue)
    tick = worker.tick()
    assert (tick.delay_s, tick.idle) == (0.0, False)
    drain(worker)
    assert store.started_with == [([Entry(1, 1), Entry(2, 3), Entry(3, 1)], ("status",))]
    assert [r["user_id"] for r in seen] == [1, 2, 3]
    assert _acked_ids(store) == [1, 2, 3]
    assert +worker.counts == Counter({"popped": 3, "started": 3, "acked": 3})
    assert ready_queue.stats("users") == {"popped": 3, "started": 3, "acked": 3}


def test_bad_and_duplicate_entries(ready_queue: ReadyQueue) -> None:
    store = FakeWorkStore(rescan_source(), {5: 2})
    ready_queue.push_raw("users", [b"5:2", b"garbage", b"5:2", b"0:1", b"5:1"])
    worker = _worker(store, Handler("users", lambda row: None, batch=False), ready_queue)
    drain(worker)
    assert store.started_with[0][0] == [Entry(5, 2), Entry(5, 1)]
    assert _acked_ids(store) == [5]
    # One exact duplicate dropped before locking, one older attempt not locked (fenced out).
    assert +worker.counts == Counter({"popped": 5, "bad": 2, "stale_entries": 2, "started": 1, "acked": 1})
    assert ready_queue.quarantined("users") == [b"malformed 0:1", b"malformed garbage"]


def test_only_bad_entries_lock_nothing(ready_queue: ReadyQueue) -> None:
    store = FakeWorkStore(rescan_source(), {})
    ready_queue.push_raw("users", [b"x", b"-1:1"])
    worker = _worker(store, Handler("users", lambda row: None, batch=False), ready_queue)
    drain(worker)
    assert store.started_with == []
    assert +worker.counts == Counter({"popped": 2, "bad": 2})


def test_failed_rows_are_not_acked(ready_queue: ReadyQueue) -> None:
    store = FakeWorkStore(rescan_source(), {i: 1 for i in range(1, 5)})

    def fn(row: Row) -> Ack | None:
        if row["user_id"] == 2:
            raise RuntimeError("boom")
        if row["user_id"] == 3:
            return Ack.touch(no_such_column=1)  # valid name, but not a column of the table
        return Ack.touch(status=7) if row["user_id"] == 4 else None

    ready_queue.push("users", [Entry(i, 1) for i in range(1, 5)])
    worker = _worker(store, Handler("users", fn, batch=False), ready_queue)
    drain(worker)
    assert _acked_ids(store) == [1, 4]
    assert [ack for _, ack in store.acked] == [Ack.default(), Ack.touch(status=7)]
    assert +worker.counts == Counter({"popped": 4, "started": 4, "failed": 2, "acked": 2})


def test_acks_that_lost_their_fence_count_as_stale(ready_queue: ReadyQueue) -> None:
    store = FakeWorkStore(rescan_source(), {1: 1, 2: 1})

    def handle(row: Row) -> None:
        if row["user_id"] == 2:
            store.take_over(2)  # while its handler runs, another worker takes row 2 over

    ready_queue.push("users", [Entry(1, 1), Entry(2, 1)])
    worker = _worker(store, Handler("users", handle, batch=False), ready_queue)
    drain(worker)
    assert +worker.counts == Counter({"popped": 2, "started": 2, "acked": 1, "stale_acks": 1})


class _RecordingQueue(ReadyQueue):
    """pop_held as the worker sees it, recorded: a plain pop (pop_held itself is the queue contract's,
    tests/unit/queue_contract.py, and tests/integration/recovery/test_pop_held.py's)."""

    calls: list[tuple[str, str]]
    counts: list[int | Sequence[int]]

    def pop_held(
        self, worker: str, sources: Sequence[str], count: int | Sequence[int], timeout_s: float
    ) -> tuple[str, list[bytes]] | None:
        self.calls.append(("pop_held", worker))
        self.counts.append(count)
        return self.pop(sources, count if isinstance(count, int) else min(count), timeout_s)

    def release_hold(
        self, worker: str, started: Mapping[bytes, bytes] | None = None, *, replace: bool = False
    ) -> None:
        self.calls.append(("release_hold", worker))
        super().release_hold(worker, started, replace=replace)


@pytest.mark.parametrize("process", [None, "host:123"])
def test_a_registered_worker_pops_into_its_hold_and_releases_it_once_the_batch_started(
    fake_redis: fakeredis.FakeRedis, process: str | None
) -> None:
    queue = _RecordingQueue(fake_redis, Keys("unit"))
    queue.calls, queue.counts = [], []
    store = FakeWorkStore(rescan_source(), {1: 1, 2: 1})
    queue.push("users", [Entry(1, 1), Entry(2, 1)])
    stores = cast(dict[str, SourceStore], {"users": store})
    handler = Handler("users", lambda row: None, batch=False)
    worker = Worker(stores, {"users": handler}, queue, SETTINGS, process=process)
    drain(worker)
    assert _acked_ids(store) == [1, 2]
    # No registry name: the plain BLMPOP and no hold at all.
    # Released as soon as the start committed (the rows are RUNNING under leases then); the last
    # call is the pop that found the lists empty.
    expected = [("pop_held", process), ("release_hold", process), ("pop_held", process)]
    assert queue.calls == ([] if process is None else expected)


def test_a_worker_pops_each_list_by_its_own_count(fake_redis: fakeredis.FakeRedis) -> None:
    """pop_batch counts rows: 100 rows is 1 entry of a range source (spans of 1,000 ids) but 100
    entries of a row source. A worker serving both pops each list by its own count."""
    queue = _RecordingQueue(fake_redis, Keys("unit"))
    queue.calls, queue.counts = [], []
    spans = FakeWorkStore(rescan_source(), {})
    spans.rows_per_entry = 1000
    rows = FakeWorkStore(rescan_source(), {1: 1})
    stores = cast(dict[str, SourceStore], {"spans": spans, "users": rows})
    handler = Handler("users", lambda row: None, batch=False)
    # A cap of ten batches: what each source keeps for the other (shared.inflight.fair_rooms,
    # at most a quarter batch while it is idle) leaves each its full batch.
    settings = SETTINGS.model_copy(update={"max_in_flight": 1000})
    worker = Worker(stores, {"spans": handler, "users": handler}, queue, settings, process="h:1")
    queue.push("users", [Entry(1, 1)])
    drain(worker)
    assert queue.counts[0] == [1, 100]


def test_a_worker_serving_two_sources_keeps_room_for_the_idle_one(fake_redis: fakeredis.FakeRedis) -> None:
    """At the cap of one batch (plain handlers' default), neither source may fill all of it: the
    other keeps room for one pop (a quarter of its share), so a backlog cannot lock it out."""
    queue = _RecordingQueue(fake_redis, Keys("unit"))
    queue.calls, queue.counts = [], []
    stores = cast(
        dict[str, SourceStore],
        {"jobs": FakeWorkStore(rescan_source(), {1: 1}), "users": FakeWorkStore(rescan_source(), {1: 1})},
    )
    handler = Handler("users", lambda row: None, batch=False)
    worker = Worker(stores, {"jobs": handler, "users": handler}, queue, SETTINGS, process="h:1")
    queue.push("users", [Entry(1, 1)])
    drain(worker)
    assert queue.counts[0] == [88, 88]  # 100 less 12 (a quarter of 50, each one's share)


class _GroupingStore(FakeWorkStore):
    """Starts only the first of the entries the first time, and leaves the others for later in two
    groups, as a leased store does with suspects (shared.policy.start_groups)."""

    acked_before: list[list[int]]

    def start(self, entries: Sequence[Entry], columns: Sequence[str] = ()) -> FakeBatch:
        first = len(self.started_with) == 0
        self.acked_before.append([int(row["user_id"]) for row, _ in self.acked])
        batch = super().start(list(entries[:1]) if first else list(entries), columns)
        if first:
            batch.later = [list(entries[1:3]), list(entries[3:])]
        return batch


def test_groups_left_for_later_start_one_by_one_after_the_previous_ack(ready_queue: ReadyQueue) -> None:
    entries = [Entry(i, 1) for i in (1, 2, 3, 4)]
    store = _GroupingStore(rescan_source(), dict.fromkeys((1, 2, 3, 4), 1))
    store.acked_before = []
    ready_queue.push("users", entries)
    worker = _worker(store, Handler("users", lambda row: None, batch=False), ready_queue)
    drain(worker)
    # What each start marked started: the first entry, then each later group in turn.
    assert [e for e, _ in store.started_with] == [entries[:1], entries[1:3], entries[3:]]
    assert store.acked_before == [[], [1], [1, 2, 3]]  # each group acked before the next one started
    assert _acked_ids(store) == [1, 2, 3, 4]
    assert +worker.counts == Counter({"popped": 4, "started": 4, "acked": 4})


class _DownStore(FakeWorkStore):
    """MySQL gone: every start fails as a lost connection does."""

    def start(self, entries: Sequence[Entry], columns: Sequence[str] = ()) -> FakeBatch:
        self.started_with.append((list(entries), tuple(columns)))
        raise TransientError("(2013, 'Lost connection to MySQL server during query')", 2013)


def test_a_batch_given_up_on_is_pushed_back_at_once_and_its_hold_released(
    ready_queue: ReadyQueue, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = _DownStore(rescan_source(), {1: 1, 2: 1})
    stores = cast(dict[str, SourceStore], {"users": store})
    settings = WorkerSettings(pop_batch=100, block_timeout_s=0.1, unit_retry_s=0)
    handler = Handler("users", lambda row: None, batch=False)
    worker = Worker(stores, {"users": handler}, ready_queue, settings, process="w1")
    ready_queue.push_raw("users", [b"1:1", b"garbage", b"2:1"])
    # a plain pop, and a hold recorded by hand, as pop_held would.
    hold = ready_queue.keys.inflight("w1")
    ready_queue.client.set(hold, b"held")
    monkeypatch.setattr(ready_queue, "pop_held", lambda w, s, c, t: ready_queue.pop(s, 100, t))
    with pytest.raises(TransientError):
        worker.tick()
    assert ready_queue.length("users") == 2  # due again now, not after the visibility timeout
    assert not ready_queue.client.exists(hold)  # nothing left for redelivery to requeue twice
    assert ready_queue.quarantined("users") == [b"malformed garbage"]  # the bad one not pushed back
    assert ready_queue.pop(["users"], 10, 0.1) == ("users", [b"1:1", b"2:1"])


def test_a_bug_is_not_pushed_back(ready_queue: ReadyQueue) -> None:
    class Broken(FakeWorkStore):
        def start(self, entries: Sequence[Entry], columns: Sequence[str] = ()) -> FakeBatch:
            raise RuntimeError("a bug")

    stores = cast(dict[str, SourceStore], {"users": Broken(rescan_source(), {1: 1})})
    worker = Worker(stores, {"users": Handler("users", lambda row: None, batch=False)}, ready_queue, SETTINGS)
    ready_queue.push_raw("users", [b"1:1"])
    with pytest.raises(RuntimeError):
        worker.tick()
    assert ready_queue.length("users") == 0  # the sweeper's visibility timeout paces a bug, not a loop


def test_a_hand_built_or_out_of_place_ack_fails_its_row_alone_and_says_why(
    ready_queue: ReadyQueue, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 25, items 1, 12, 13: Acks the store refuses (NaN delay, past jobs.max_delay_s, the
    due column, a retry on a row source) fail their own rows, each logged in one line with why;
    the rest of the batch is acked."""
    store = FakeWorkStore(rescan_source(), {i: 1 for i in range(1, 7)})
    bad = {
        2: Ack("touch", delay_s=float("nan")),
        3: Ack("touch", delay_s=1e18),
        4: Ack.touch(updated_time="2099-01-01"),
        5: Ack.retry(60),
    }
    ready_queue.push("users", [Entry(i, 1) for i in range(1, 7)])
    worker = _worker(store, Handler("users", lambda row: bad.get(row["user_id"]), batch=False), ready_queue)
    with caplog.at_level("ERROR", "duecast.worker"):
        drain(worker)
    assert _acked_ids(store) == [1, 6]
    assert sorted(r["user_id"] for r in store.failed) == [2, 3, 4, 5]
    lines = {
        r.row_id: r.getMessage() for r in caplog.records if getattr(r, "event", "") == "worker.invalid_ack"
    }  # type: ignore[attr-defined]
    assert "finite" in lines[2]
    assert "jobs.max_delay_s" in lines[3]
    assert "the due column of source users" in lines[4]
    assert "Ack.retry() is for jobs and consumer groups" in lines[5]


def test_an_ack_one_outcome_spoils_fails_that_row_alone_and_the_rest_are_acked(
    ready_queue: ReadyQueue, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 25, item 1: whatever an ack raises that is not the database's state (down, a lock, a
    grant), it is split: each outcome acked alone, and the one that raises again fails its row.
    Before, the whole ack was retried 4-5 times a second for as long as the worker lived."""
    store = FakeWorkStore(rescan_source(), {i: 1 for i in range(1, 5)})
    real_ack = FakeBatch.ack

    def ack(self: FakeBatch, acks: Sequence[tuple[Row, Ack]]) -> AckCounts:
        if any(row["user_id"] == 3 for row, _ in acks):
            raise UnicodeEncodeError("utf-8", "\udcff", 0, 1, "surrogates not allowed")
        if any(row["user_id"] == 4 for row, _ in acks):
            raise StorageError("Got overflow when converting 1e24 to DATETIME", 1916)
        return real_ack(self, acks)

    monkeypatch.setattr(FakeBatch, "ack", ack)
    ready_queue.push("users", [Entry(i, 1) for i in range(1, 5)])
    worker = _worker(store, Handler("users", lambda row: None, batch=False), ready_queue)
    drain(worker, timeout_s=5)
    assert _acked_ids(store) == [1, 2]
    assert sorted(r["user_id"] for r in store.failed) == [3, 4]
    assert +worker.counts == Counter({"popped": 4, "started": 4, "acked": 2, "failed": 2})


def test_a_lone_ack_that_spoils_fails_its_row(
    ready_queue: ReadyQueue, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = FakeWorkStore(rescan_source(), {1: 1})

    def ack(self: FakeBatch, acks: Sequence[tuple[Row, Ack]]) -> AckCounts:
        raise StorageError("Got overflow when converting 1e24 to DATETIME", 1916)

    monkeypatch.setattr(FakeBatch, "ack", ack)
    ready_queue.push("users", [Entry(1, 1)])
    drain(_worker(store, Handler("users", lambda row: None, batch=False), ready_queue), timeout_s=5)
    assert [r["user_id"] for r in store.failed] == [1]


@pytest.mark.parametrize(
    "error",
    [TransientError("lost connection", 2013), StorageError("UPDATE command denied", 1142)],
    ids=["transient", "access-denied"],
)
def test_an_ack_the_database_cannot_take_is_kept_whole_and_tried_again(
    ready_queue: ReadyQueue, monkeypatch: pytest.MonkeyPatch, error: Exception
) -> None:
    store = FakeWorkStore(rescan_source(), {1: 1, 2: 1})
    real_ack = FakeBatch.ack
    calls: list[int] = []

    def ack(self: FakeBatch, acks: Sequence[tuple[Row, Ack]]) -> AckCounts:
        calls.append(len(acks))
        if len(calls) == 1:
            raise error
        return real_ack(self, acks)

    monkeypatch.setattr(FakeBatch, "ack", ack)
    ready_queue.push("users", [Entry(1, 1), Entry(2, 1)])
    drain(_worker(store, Handler("users", lambda row: None, batch=False), ready_queue), timeout_s=5)
    assert calls[:2] == [2, 2]  # never split: the whole ack again, after a backoff (a grant too)
    assert _acked_ids(store) == [1, 2]
    assert store.failed == []
