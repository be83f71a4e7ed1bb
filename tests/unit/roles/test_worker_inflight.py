"""worker.Worker with many rows in flight: a slow check holds up nothing but itself, more entries are
popped while checks run, a call past its limit fails alone, and a worker whose threads are stuck leaves."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Sequence
from typing import cast

from duecast.shared.acks import Row
from duecast.shared.api.handlers import Handler
from duecast.shared.entries import Entry
from duecast.shared.fanout.queue import ReadyQueue
from duecast.shared.settings import WorkerSettings
from duecast.shared.storage.source_store import SourceStore
from duecast.worker.leaving import EXIT_STUCK
from duecast.worker.worker import Worker
from tests.unit.fakes import FakeBatch, FakeWorkStore, rescan_source

SETTINGS = WorkerSettings(pop_batch=10, block_timeout_s=0.1, max_in_flight=100)


def _worker(store: FakeWorkStore, handler: Handler, queue: ReadyQueue, **kwargs: object) -> Worker:
    stores = cast(dict[str, SourceStore], {store.src.name: store})
    settings = kwargs.pop("settings", SETTINGS)
    return Worker(stores, {store.src.name: handler}, queue, settings, **kwargs)  # type: ignore[arg-type]


def tick_until(worker: Worker, done: Callable[[], object], what: str, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not done():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        worker.tick()


def _acked(store: FakeWorkStore) -> set[int]:
    return {int(row["user_id"]) for row, _ in store.acked}


def test_a_slow_async_check_holds_up_only_itself(ready_queue: ReadyQueue) -> None:
    store = FakeWorkStore(rescan_source(), dict.fromkeys(range(1, 11), 1))
    gate = asyncio.Event()
    loop_box: list[asyncio.AbstractEventLoop] = []

    async def check(row: Row) -> None:
        if row["user_id"] == 1:
            loop_box.append(asyncio.get_running_loop())
            await gate.wait()

    worker = _worker(store, Handler("users", None, batch=False, afn=check), ready_queue)
    ready_queue.push("users", [Entry(i, 1) for i in range(1, 11)])
    try:
        tick_until(worker, lambda: _acked(store) == set(range(2, 11)), "the nine fast checks to be acked")
        assert worker.in_flight == 1  # row 1 still awaiting, alone
        loop_box[0].call_soon_threadsafe(gate.set)
        tick_until(worker, lambda: not worker.flights, "row 1 to be acked and its batch closed")
        assert _acked(store) == set(range(1, 11))
        assert store.live == {}  # the batch's leases are no longer kept
    finally:
        worker.close()


def test_entries_are_popped_and_started_while_checks_are_in_flight(ready_queue: ReadyQueue) -> None:
    store = FakeWorkStore(rescan_source(), dict.fromkeys(range(1, 31), 1))
    release = threading.Event()

    async def check(row: Row) -> None:
        await asyncio.get_running_loop().run_in_executor(None, release.wait, 10)

    worker = _worker(store, Handler("users", None, batch=False, afn=check), ready_queue)
    ready_queue.push("users", [Entry(i, 1) for i in range(1, 31)])
    try:
        # pop_batch is 10: three starts, none of whose checks has finished yet.
        tick_until(worker, lambda: len(store.started_with) == 3, "three batches started")
        assert store.acked == []
        assert worker.in_flight == 30
        release.set()
        tick_until(worker, lambda: len(_acked(store)) == 30, "every check acked")
    finally:
        release.set()
        worker.close()


def test_no_more_is_started_than_max_in_flight(ready_queue: ReadyQueue) -> None:
    store = FakeWorkStore(rescan_source(), dict.fromkeys(range(1, 101), 1))
    release = threading.Event()

    async def check(row: Row) -> None:
        await asyncio.get_running_loop().run_in_executor(None, release.wait, 10)

    settings = WorkerSettings(pop_batch=10, block_timeout_s=0.1, max_in_flight=25)
    worker = _worker(store, Handler("users", None, batch=False, afn=check), ready_queue, settings=settings)
    ready_queue.push("users", [Entry(i, 1) for i in range(1, 101)])
    try:
        tick_until(worker, lambda: worker.in_flight >= 20, "the worker to fill up")
        for _ in range(20):
            worker.tick()
        assert 20 <= worker.in_flight <= 25
        release.set()
        tick_until(worker, lambda: len(_acked(store)) == 100, "every check acked")
    finally:
        release.set()
        worker.close()


def test_a_plain_call_past_its_limit_fails_alone_and_a_stuck_worker_leaves(ready_queue: ReadyQueue) -> None:
    src = rescan_source(timeout_s=0.3)
    store = FakeWorkStore(src, dict.fromkeys(range(1, 6), 1))
    release = threading.Event()
    left: list[int] = []

    def check(row: Row) -> None:
        if row["user_id"] == 3:
            release.wait(10)

    settings = WorkerSettings(pop_batch=10, block_timeout_s=0.1, concurrency=2)
    worker = _worker(
        store, Handler("users", check, batch=False), ready_queue, settings=settings, leave=left.append
    )
    ready_queue.push("users", [Entry(i, 1) for i in range(1, 6)])
    try:
        tick_until(worker, lambda: _acked(store) == {1, 2, 4, 5}, "the other four checks acked")
        tick_until(worker, lambda: store.failed, "row 3 to be given up")
        assert [int(r["user_id"]) for r in store.failed] == [3]
        tick_until(worker, lambda: worker.counts["timed_out"] == 1, "the time-out to be counted")
        # One of two threads stuck is not "most": the worker stays.
        assert not worker.leaving
        assert left == []
    finally:
        release.set()
        worker.close()


def test_a_worker_whose_only_thread_is_stuck_leaves_with_its_exit_code(ready_queue: ReadyQueue) -> None:
    store = FakeWorkStore(rescan_source(timeout_s=0.2), dict.fromkeys(range(1, 3), 1))
    release = threading.Event()
    left: list[int] = []

    def check(row: Row) -> None:
        if row["user_id"] == 1:
            release.wait(10)

    worker = _worker(store, Handler("users", check, batch=False), ready_queue, leave=left.append)
    ready_queue.push("users", [Entry(1, 1), Entry(2, 1)])
    try:
        tick_until(worker, lambda: left, "the worker to leave")
        assert left == [EXIT_STUCK]
        assert [int(r["user_id"]) for r in store.failed] == [1]
    finally:
        release.set()
        worker.close()


class _LaterStore(FakeWorkStore):
    """Starts the first entry, and leaves the others for later, one group each (suspects)."""

    def start(self, entries: Sequence[Entry], columns: Sequence[str] = ()) -> FakeBatch:
        first = not self.started_with
        batch = super().start(list(entries[:1]) if first else list(entries), columns)
        if first:
            batch.later = [[e] for e in entries[1:]]
        return batch


def test_a_stuck_worker_starts_no_group_left_for_later_and_hands_them_back(ready_queue: ReadyQueue) -> None:
    """Leaving, it would start the next group only for it never to run (its one thread is stuck), and
    its lease to run out as an interruption blamed on that group: the chaos poison test dead-lettered a
    healthy job so. The groups go back to the ready list unstarted, under their attempts."""
    store = _LaterStore(rescan_source(timeout_s=0.2), dict.fromkeys(range(1, 4), 1))
    release = threading.Event()
    left: list[int] = []

    def check(row: Row) -> None:
        release.wait(10)  # the first row hangs

    worker = _worker(store, Handler("users", check, batch=False), ready_queue, leave=left.append)
    ready_queue.push("users", [Entry(i, 1) for i in (1, 2, 3)])
    try:
        tick_until(worker, lambda: left, "the worker to leave")
        assert left == [EXIT_STUCK]
        assert [e for e, _ in store.started_with] == [[Entry(1, 1)]]  # nothing started after the hang
        assert [int(r["user_id"]) for r in store.failed] == [1]
        assert sorted(ready_queue.pop(["users"], 10, 0.01)[1]) == [b"2:1", b"3:1"]  # due again now
    finally:
        release.set()
        worker.close()


class _GivingBackBatch(FakeBatch):
    given_back = 0

    def give_back(self) -> int:
        type(self).given_back += 1
        return 1


class _SuspectsLaterStore(FakeWorkStore):
    """Its second start is a group of suspects, one that can be given back (as a job run can)."""

    def start(self, entries: Sequence[Entry], columns: Sequence[str] = ()) -> FakeBatch:
        batch = super().start(entries, columns)
        if len(self.started_with) == 2:
            batch.__class__ = _GivingBackBatch
            batch.suspects = True
        return batch


def test_a_stuck_worker_gives_back_suspects_it_started_and_never_ran(ready_queue: ReadyQueue) -> None:
    """Suspects started while a call hangs wait to run alone; the worker leaving gives them back
    rather than leave them to their leases (an interruption blamed on them)."""
    store = _SuspectsLaterStore(rescan_source(timeout_s=0.3), dict.fromkeys((1, 2), 1))
    release = threading.Event()
    left: list[int] = []
    ran: list[int] = []

    def check(row: Row) -> None:
        ran.append(int(row["user_id"]))
        release.wait(10)

    worker = _worker(store, Handler("users", check, batch=False), ready_queue, leave=left.append)
    ready_queue.push("users", [Entry(1, 1)])
    try:
        tick_until(worker, lambda: ran, "the first row to hang")
        ready_queue.push("users", [Entry(2, 1)])
        tick_until(worker, lambda: len(store.started_with) == 2, "the suspect to be started")
        tick_until(worker, lambda: left, "the worker to leave")
        assert left == [EXIT_STUCK]
        assert ran == [1]
        assert _GivingBackBatch.given_back == 1
    finally:
        release.set()
        worker.close()


def test_stopping_acks_what_is_in_flight(ready_queue: ReadyQueue) -> None:
    store = FakeWorkStore(rescan_source(), dict.fromkeys(range(1, 6), 1))

    async def check(row: Row) -> None:
        await asyncio.sleep(0.2)

    worker = _worker(store, Handler("users", None, batch=False, afn=check), ready_queue)
    ready_queue.push("users", [Entry(i, 1) for i in range(1, 6)])
    try:
        tick_until(worker, lambda: worker.flights, "a batch in flight")
        worker.finish(grace_s=5)
        assert _acked(store) == set(range(1, 6))
        assert ready_queue.length("users") == 0
    finally:
        worker.close()


class _SuspectStore(FakeWorkStore):
    """Its second start is a group of suspects (rows whose earlier runs were interrupted)."""

    def start(self, entries: Sequence[Entry], columns: Sequence[str] = ()) -> FakeBatch:
        batch = super().start(entries, columns)
        batch.suspects = len(self.started_with) == 2
        return batch


def test_suspects_run_with_nothing_else_in_flight_and_nothing_is_popped_beside_them(
    ready_queue: ReadyQueue,
) -> None:
    store = _SuspectStore(rescan_source(), dict.fromkeys(range(1, 31), 1))
    release = threading.Event()
    ran: list[int] = []

    async def check(row: Row) -> None:
        ran.append(int(row["user_id"]))
        if row["user_id"] <= 10:
            await asyncio.get_running_loop().run_in_executor(None, release.wait, 10)

    worker = _worker(store, Handler("users", None, batch=False, afn=check), ready_queue)
    ready_queue.push("users", [Entry(i, 1) for i in range(1, 31)])
    try:
        tick_until(worker, lambda: len(store.started_with) == 2, "the suspects to be started")
        for _ in range(20):
            worker.tick()
        assert sorted(ran) == list(range(1, 11))  # the suspects (11-20) wait for the first batch
        assert len(store.started_with) == 2  # and nothing more is popped beside them
        release.set()
        tick_until(worker, lambda: len(_acked(store)) == 30, "every check acked")
        assert ran[10:20] == list(range(11, 21))  # then they ran, alone, before the last batch
    finally:
        release.set()
        worker.close()
