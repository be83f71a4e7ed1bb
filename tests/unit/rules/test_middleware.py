"""Middleware (shared/api/middleware.py): enqueue middleware changes jobs in order and carries meta to
the run; run middleware wraps plain and async tasks, first added outermost; none registered, none
runs. Through duecast.testing, which runs tasks as the worker does."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any

import pytest

from duecast import EnqueueError, Job, JobContext, Middleware, Registry, current_job
from duecast.testing import Jobs

seen: list[str] = []
app = Registry()


@app.task("plain")
def plain(payload: Any) -> None:
    seen.append(f"plain meta={dict(current_job().meta)}")


@app.task("coro")
async def coro(payload: Any) -> None:
    seen.append("coro")


class Tag(Middleware):
    def __init__(self, name: str) -> None:
        self.name = name

    def enqueue(self, job: Job) -> Job:
        return replace(job, meta={**(job.meta or {}), self.name: str(len(job.meta or {}))})

    def run(self, job: JobContext, call: Callable[[], Any]) -> Any:
        seen.append(f"{self.name} in")
        try:
            return call()
        finally:
            seen.append(f"{self.name} out")

    async def arun(self, job: JobContext, call: Callable[[], Awaitable[Any]]) -> Any:
        seen.append(f"{self.name} ain")
        return await call()


@pytest.fixture(autouse=True)
def _clear() -> None:
    seen.clear()


def test_run_middleware_wraps_plain_and_async_tasks_first_added_outermost() -> None:
    registry = Registry()
    registry.include(app)
    registry.use(Tag("a"))
    registry.use(Tag("b"))
    jobs = Jobs(registry)
    jobs.enqueue("plain")
    jobs.enqueue("coro")
    jobs.drain()
    assert seen == ["a in", "b in", "plain meta={}", "b out", "a out", "a ain", "b ain", "coro"]


def test_enqueue_middleware_carries_meta_to_the_run_in_order() -> None:
    jobs = Jobs(app)
    jobs.use(Tag("first"))
    jobs.use(Tag("second"))
    jobs.enqueue("plain")
    jobs.drain()
    assert seen == ["plain meta={'first': '0', 'second': '1'}"]


def test_without_middleware_nothing_wraps_and_bad_meta_is_refused() -> None:
    jobs = Jobs(app)
    jobs.enqueue("plain")
    jobs.drain()
    assert seen == ["plain meta={}"]
    with pytest.raises(EnqueueError, match="meta must map strings to strings"):
        jobs.enqueue_many([Job("plain", meta={"n": 1})])  # type: ignore[dict-item]
    with pytest.raises(EnqueueError, match="the limit is 4096"):
        jobs.enqueue_many([Job("plain", meta={"big": "x" * 5000})])


def test_use_takes_only_middleware() -> None:
    with pytest.raises(TypeError, match=r"Registry\.use takes a duecast Middleware"):
        app.use(object())  # type: ignore[arg-type]
