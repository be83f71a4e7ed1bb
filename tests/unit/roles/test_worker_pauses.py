"""worker.Worker and a paused source: its entries are not popped (so nothing of it starts) while it
is paused, and are once it is resumed; other sources go on."""

from __future__ import annotations

from typing import cast

from duecast.shared.api.handlers import Handler
from duecast.shared.entries import Entry
from duecast.shared.fanout.queue import ReadyQueue
from duecast.shared.settings import WorkerSettings
from duecast.shared.storage.source_store import SourceStore
from duecast.worker.worker import Worker
from tests.unit.fakes import FakeWorkStore, rescan_source
from tests.unit.roles.test_worker_inflight import tick_until

SETTINGS = WorkerSettings(pop_batch=10, block_timeout_s=0.1, max_in_flight=100)


def test_a_paused_sources_entries_wait_in_redis_until_it_is_resumed(ready_queue: ReadyQueue) -> None:
    users = FakeWorkStore(rescan_source(), dict.fromkeys(range(1, 6), 1))
    other = FakeWorkStore(rescan_source(name="other"), dict.fromkeys(range(1, 6), 1))
    stores = cast(dict[str, SourceStore], {"users": users, "other": other})
    handlers = {name: Handler(name, lambda _row: None, batch=False) for name in stores}
    worker = Worker(stores, handlers, ready_queue, SETTINGS)  # type: ignore[arg-type]
    paused = {"users"}
    worker.starter.paused = lambda: paused
    ready_queue.push("users", [Entry(i, 1) for i in range(1, 6)])
    ready_queue.push("other", [Entry(i, 1) for i in range(1, 6)])

    tick_until(worker, lambda: len(other.acked) == 5 and not worker.flights, "the other source's checks")
    for _ in range(5):
        worker.tick()
    assert users.acked == []
    assert ready_queue.length("users") == 5  # not popped: nothing of it started, nothing lost

    paused.clear()
    tick_until(worker, lambda: len(users.acked) == 5, "the resumed source's checks")
    assert ready_queue.length("users") == 0
