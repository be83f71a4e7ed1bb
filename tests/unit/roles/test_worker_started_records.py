"""A worker names each batch of re-scan rows it starts in its started set (issue 24.4), so that its
supervisor can hand them back the moment it exits: one record per batch, written by the MULTI that
releases the pop's hold (no round trip of its own), removed once the batch is over. Stores whose
started rows record their worker in MySQL (job runs, a group's messages) write none."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import cast

import fakeredis

from duecast.shared.api.handlers import Handler
from duecast.shared.entries import Entry, encode_hold
from duecast.shared.fanout.keys import Keys
from duecast.shared.fanout.queue import ReadyQueue
from duecast.shared.settings import WorkerSettings
from duecast.shared.states import ATTEMPT_COLUMN
from duecast.shared.storage.protocol import NamesStarted, StartsUnnamed
from duecast.shared.storage.source_store import SourceStore
from duecast.worker.started import SLACK, StartedLog
from duecast.worker.worker import Worker
from tests.unit.fakes import FakeBatch, FakeWorkStore, rescan_source
from tests.unit.roles.test_worker import drain

WORKER = "host:7"


class NamedBatch(FakeBatch):
    @property
    def entries(self) -> list[Entry]:
        return [Entry(int(r["user_id"]), int(r[ATTEMPT_COLUMN])) for r in self.rows]


class UnnamedStore(FakeWorkStore):
    """A row-mode store as the worker sees it: its rows record no worker (StartsUnnamed)."""

    def start(self, entries: Sequence[Entry], columns: Sequence[str] = ()) -> FakeBatch:
        batch = super().start(entries, columns)
        batch.__class__ = NamedBatch  # the same batch, saying which entries it started
        return batch

    def requeue_started(self, entries: Sequence[Entry]) -> int:
        raise AssertionError("the supervisor's, never the worker's")


class Recording(ReadyQueue):
    def __init__(self, client: fakeredis.FakeRedis) -> None:
        super().__init__(client, Keys("unit"))
        self.released: list[tuple[dict[bytes, bytes], bool]] = []
        self.calls: list[str] = []  # every Redis operation of the port the worker made

    def release_hold(
        self, worker: str, started: Mapping[bytes, bytes] | None = None, *, replace: bool = False
    ) -> None:
        assert worker == WORKER
        self.released.append((dict(started or {}), replace))
        super().release_hold(worker, started, replace=replace)


def run(store: FakeWorkStore, queue: Recording) -> None:
    settings = WorkerSettings(pop_batch=2, block_timeout_s=0.1)
    stores = cast(dict[str, SourceStore], {"users": store})
    handler = Handler("users", lambda row: None, batch=False)
    drain(Worker(stores, {"users": handler}, queue, settings, process=WORKER))


def test_each_started_batch_is_recorded_with_its_holds_release_and_dropped_when_over(
    fake_redis: fakeredis.FakeRedis,
) -> None:
    store = UnnamedStore(rescan_source(), {1: 1, 2: 3, 3: 1})
    assert isinstance(store, StartsUnnamed)
    assert isinstance(store.start([Entry(1, 1)]), NamesStarted)
    store = UnnamedStore(rescan_source(), {1: 1, 2: 3, 3: 1})
    queue = Recording(fake_redis)
    queue.push("users", [Entry(1, 1), Entry(2, 3), Entry(3, 1), Entry(4, 1)])  # 4: stale, no row
    run(store, queue)

    one, two = encode_hold("users", [b"1:1", b"2:3"]), encode_hold("users", [b"3:1"])
    # One release per popped batch, each record riding on it, and the blank of the batch before.
    assert queue.released == [({b"0": one}, False), ({b"0": b"", b"1": two}, False)]
    # The last batch's record stays until the next pop's release: harmless, as the supervisor
    # puts back only rows still RUNNING under the attempt recorded (these are acked).
    assert queue.started_by(WORKER) == [("users", [b"3:1"])]
    assert sorted(int(r["user_id"]) for r, _ in store.acked) == [1, 2, 3]


def test_a_store_whose_rows_name_their_worker_records_nothing(fake_redis: fakeredis.FakeRedis) -> None:
    store = FakeWorkStore(rescan_source(), {1: 1, 2: 1})
    queue = Recording(fake_redis)
    queue.push("users", [Entry(1, 1), Entry(2, 1)])
    run(store, queue)
    assert queue.released == [({}, False)]
    assert not fake_redis.exists(queue.keys.started(WORKER))


def test_the_started_hash_stays_about_as_big_as_what_is_in_flight(fake_redis: fakeredis.FakeRedis) -> None:
    """An async worker always has batches in flight: ended ones are blanked at the next release, and
    the hash is rewritten to the live ones once the blanks exceed twice them plus SLACK."""
    queue = Recording(fake_redis)
    log = StartedLog(queue, WORKER)
    key = queue.keys.started(WORKER)
    live = [log.add("users", [Entry(k, 1)]) for k in (1, 2, 3)]
    log.release()
    for n in range(100):  # one ends, one starts, three always in flight
        ended, live = live[0], [*live[1:], log.add("users", [Entry(n + 4, 1)])]
        log.over([ended])
        log.release()
        assert fake_redis.hlen(key) <= 3 + 2 * 3 + SLACK + 1
        assert [entries for _, entries in queue.started_by(WORKER)] == [
            [b"%d:1" % (n + k)] for k in (2, 3, 4)
        ]
    assert sum(replace for _, replace in queue.released) >= 4
    log.over(live)
    log.release()  # (the next pop's)
    assert queue.started_by(WORKER) == []
