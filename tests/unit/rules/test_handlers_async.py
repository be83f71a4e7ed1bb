"""Registry: `async def` handlers, tasks and consumers register with the same decorators; what may not
be async (a transactional task or consumer) is refused at registration, in one clear line."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from typing import Any

import pytest

from duecast import Ack, Message, Registry, Row
from duecast.shared.settings import JOBS_SOURCE


def arun(coro: Coroutine[Any, Any, Any]) -> Any:
    """asyncio.run on a thread of its own, as the worker's loop runs: this thread may have a loop
    running already (the browser tests' Playwright leaves one)."""
    out: list[Any] = []
    raised: list[BaseException] = []

    def run() -> None:
        try:
            out.append(asyncio.run(coro))
        except BaseException as exc:
            raised.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    if raised:
        raise raised[0]
    return out[0]


def test_an_async_row_handler_runs_on_the_loop() -> None:
    reg = Registry()

    @reg.row("users", columns=["status"])
    async def check(row: Row) -> Ack:
        await asyncio.sleep(0)
        return Ack.touch(status="ok")

    handler = reg.handler("users")
    assert handler.fn is None
    assert handler.afn is check
    assert handler.plan({"id": 1}) == (True, None)
    assert arun(handler.run_one({"id": 1, "status": "x"})) == Ack.touch(status="ok")


def test_an_async_batch_handler_returning_a_wrong_count_fails_every_row() -> None:
    reg = Registry()

    @reg.batch("users")
    async def check_all(rows: list[Row]) -> list[Ack]:
        return [Ack.default()]

    out = arun(reg.handler("users").run_batch([{"id": 1}, {"id": 2}]))
    assert len(out) == 2
    assert all(isinstance(o, ValueError) for o in out)


def test_plain_and_async_tasks_share_the_jobs_source_and_each_row_takes_its_own_way() -> None:
    reg = Registry()
    seen: list[Any] = []

    @reg.task("plain")
    def plain(payload: Any) -> None:
        seen.append(("plain", payload))

    @reg.task("slow", timeout_s=5)
    async def slow(payload: Any) -> None:
        seen.append(("slow", payload))

    handler = reg.handler(JOBS_SOURCE)
    assert handler.plan({"task": "plain"}) == (False, None)
    assert handler.plan({"task": "slow"}) == (True, 5)
    row = {
        "id": 7,
        "dc_attempt": 1,
        "queue": "default",
        "task": "slow",
        "payload": "[1]",
        "created_at": "2026-01-01 00:00:00",
        "errors": 0,
        "max_attempts": 3,
    }
    assert arun(handler.run_one(row)) == Ack.default()
    assert handler.run([{**row, "task": "plain"}]) == [Ack.default()]
    assert seen == [("slow", [1]), ("plain", [1])]


def test_a_transactional_task_or_consumer_may_not_be_async() -> None:
    reg = Registry()

    async def task(payload: Any, cursor: Any) -> None:
        return None

    with pytest.raises(ValueError, match="must be a plain function, not async def"):
        reg.task("t", transactional=True)(task)

    async def consume(message: Message, cursor: Any) -> None:
        return None

    with pytest.raises(ValueError, match="must be a plain function, not async def"):
        reg.consumer("orders", group="billing", transactional=True)(consume)


@pytest.mark.parametrize("timeout_s", [0, -1, 8 * 86400])
def test_a_task_timeout_out_of_range_is_refused(timeout_s: float) -> None:
    with pytest.raises(ValueError, match="timeout_s must be > 0"):
        Registry().task("t", timeout_s=timeout_s)


def test_include_keeps_async_handlers_and_task_timeouts() -> None:
    a, b = Registry(), Registry()

    @a.row("users")
    async def check(row: Row) -> None:
        return None

    @a.task("slow", timeout_s=3)
    async def slow(payload: Any) -> None:
        return None

    b.include(a)
    assert b.handler("users").afn is check
    assert b.handler(JOBS_SOURCE).plan({"task": "slow"}) == (True, 3)
