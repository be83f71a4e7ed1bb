"""worker/cancels.py: the worker asks about cancels only while jobs run here, at most once per
interval, flags the cancelled ones for `current_job().cancelled`, and rides out MySQL being away."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from datetime import datetime
from typing import Any, cast

from duecast import current_job
from duecast.shared.acks import Ack
from duecast.shared.api.context import JobContext, cancel_held, held_jobs, running
from duecast.shared.api.handlers import Registry
from duecast.shared.settings import JOBS_SOURCE
from duecast.shared.storage.job_cancels import JobCancels
from duecast.shared.storage.units import StorageError
from duecast.worker.cancels import CancelWatch
from tests.unit.rules.test_handlers_async import arun

ROW = {
    "dc_attempt": 1,
    "queue": "default",
    "created_at": datetime(2026, 1, 1),
    "errors": 0,
    "max_attempts": 5,
}


class FakeCancels:
    def __init__(self, cancelled: set[int]) -> None:
        self.cancelled = cancelled
        self.asked: list[list[int]] = []
        self.down = False

    def cancelled_among(self, ids: Iterable[int]) -> set[int]:
        asked = sorted(ids)
        self.asked.append(asked)
        if self.down:
            raise StorageError("MySQL is away")
        return self.cancelled & set(asked)


def job(job_id: int) -> JobContext:
    return JobContext(job_id, 1, "default", "t", datetime(2026, 1, 1), 0, 5)


def watch(fake: FakeCancels, every_s: float = 5.0) -> CancelWatch:
    return CancelWatch(cast(JobCancels, cast(Any, fake)), every_s)


def test_nothing_held_nothing_asked() -> None:
    fake = FakeCancels({1})
    watch(fake).tick(100.0)
    assert fake.asked == []


def test_held_jobs_are_asked_about_once_per_interval_and_the_cancelled_flagged() -> None:
    fake = FakeCancels({7})
    w = watch(fake)
    seven, eight = job(7), job(8)
    with running(seven), running(eight):
        w.tick(100.0)
        w.tick(104.9)  # within the interval: not asked again
        assert fake.asked == [[7, 8]]
        assert (seven.cancelled, eight.cancelled) == (True, False)
        w.tick(105.0)
        assert len(fake.asked) == 2
        assert w.cancelled == 1  # told once, not at each read
    assert not seven.cancelled  # its run is over: nothing held


def test_mysql_away_is_asked_again_at_the_next_interval() -> None:
    fake = FakeCancels({3})
    fake.down = True
    w = watch(fake)
    three = job(3)
    with running(three):
        w.tick(0.0)
        assert not three.cancelled
        fake.down = False
        w.tick(5.0)
        assert three.cancelled


def test_a_task_is_held_while_it_runs_and_let_go_after_even_when_it_raises() -> None:
    # The plain path (call_as) and the async one (running with its task) hold the job the same way.
    registry = Registry()
    seen: dict[str, Any] = {}

    @registry.task("plain")
    def plain(payload: Any) -> None:
        seen["plain"] = (held_jobs(), current_job().id)
        if payload == "raise":
            raise ValueError("boom")

    @registry.task("waits")
    async def waits(payload: Any) -> None:
        seen["waits"] = (held_jobs(), current_job().id)

    handler = registry.handler(JOBS_SOURCE)
    plain_row = {**ROW, "id": 11, "task": "plain", "payload": '"ok"'}
    assert handler.run([plain_row]) == [Ack.default()]
    assert seen["plain"] == ([11], 11)
    raised = handler.run([{**plain_row, "payload": '"raise"'}])
    assert isinstance(raised[0], ValueError)
    assert held_jobs() == []
    assert handler.afn is not None
    assert arun(handler.afn({**ROW, "id": 12, "task": "waits", "payload": "null"})) is None
    assert seen["waits"] == ([12], 12)
    assert held_jobs() == []


def test_a_cancel_cancels_the_async_jobs_own_task() -> None:
    registry = Registry()

    @registry.task("waits")
    async def waits(payload: Any) -> None:
        assert cancel_held([current_job().id]) == 1  # as the worker's cancel watch would, mid-run
        await asyncio.sleep(30)

    assert registry.handler(JOBS_SOURCE).afn is not None
    outcome = arun(registry.handler(JOBS_SOURCE).afn({**ROW, "id": 13, "task": "waits", "payload": "null"}))  # type: ignore[misc]
    assert outcome == Ack.discard("cancelled")
