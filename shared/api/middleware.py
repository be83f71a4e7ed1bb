"""Middleware: hooks around each enqueue and around each task's run, on which tracing, metrics or
tenancy are built (integrations/otel.py is one). With none registered, nothing is wrapped: no cost.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from ..acks import Row
from .context import JobContext
from .job_input import Job


class Middleware:
    """Subclass and override what you need; each default passes through.

    `enqueue(job)` runs in the caller, before the job is checked and written: return the job, or
    a changed copy (`dataclasses.replace(job, meta={...})` carries strings to the run). `run(job,
    call)` wraps a plain task's run on its worker thread, `arun(job, call)` an `async def` task's on
    the event loop: call `call()` (await it) once and return what it returns; raising fails the run.
    """

    def enqueue(self, job: Job) -> Job:
        return job

    def run(self, job: JobContext, call: Callable[[], Any]) -> Any:
        return call()

    async def arun(self, job: JobContext, call: Callable[[], Awaitable[Any]]) -> Any:
        return await call()

    def check(self, source: str, rows: list[Row], call: Callable[[], Any]) -> Any:
        """Around a re-scan or consumer handler's call (a row handler: one row; a batch handler: its
        slice). Only middleware that overrides check/acheck wraps these: the hot path stays bare."""
        return call()

    async def acheck(self, source: str, rows: list[Row], call: Callable[[], Awaitable[Any]]) -> Any:
        return await call()


def checking(middleware: Sequence[Middleware]) -> list[Middleware]:
    """The middleware that wraps re-scan and consumer calls: those overriding check or acheck."""
    return [
        mw
        for mw in middleware
        if type(mw).check is not Middleware.check or type(mw).acheck is not Middleware.acheck
    ]


def checked(middleware: Sequence[Middleware], source: str, fn: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """A plain row or batch handler `fn(row | rows)` inside every check middleware."""

    def call(arg: Any) -> Any:
        rows = arg if isinstance(arg, list) else [arg]
        inner: Callable[[], Any] = lambda: fn(arg)  # noqa: E731
        for mw in reversed(middleware):
            inner = _bind_check(mw, source, rows, inner)
        return inner()

    return call


def achecked(
    middleware: Sequence[Middleware], source: str, fn: Callable[[Any], Awaitable[Any]]
) -> Callable[[Any], Awaitable[Any]]:
    """The async twin of `checked`."""

    async def call(arg: Any) -> Any:
        rows = arg if isinstance(arg, list) else [arg]
        inner: Callable[[], Awaitable[Any]] = lambda: fn(arg)  # noqa: E731
        for mw in reversed(middleware):
            inner = _abind_check(mw, source, rows, inner)
        return await inner()

    return call


def _bind_check(mw: Middleware, source: str, rows: list[Row], inner: Callable[[], Any]) -> Callable[[], Any]:
    return lambda: mw.check(source, rows, inner)


def _abind_check(
    mw: Middleware, source: str, rows: list[Row], inner: Callable[[], Awaitable[Any]]
) -> Callable[[], Awaitable[Any]]:
    return lambda: mw.acheck(source, rows, inner)


def through_enqueue(middleware: Sequence[Middleware], job: Job) -> Job:
    """`job` as every enqueue middleware leaves it, first registered first."""
    for mw in middleware:
        job = mw.enqueue(job)
        if not isinstance(job, Job):
            raise TypeError(f"{type(mw).__name__}.enqueue must return a Job, not {type(job).__name__}")
    return job


def wrapped(middleware: Sequence[Middleware], job: JobContext, call: Callable[[], Any]) -> Callable[[], Any]:
    """`call` inside every run middleware, the first registered outermost."""
    for mw in reversed(middleware):
        call = _bind(mw, job, call)
    return call


def awrapped(
    middleware: Sequence[Middleware], job: JobContext, call: Callable[[], Awaitable[Any]]
) -> Callable[[], Awaitable[Any]]:
    """The async twin of `wrapped`."""
    for mw in reversed(middleware):
        call = _abind(mw, job, call)
    return call


def _bind(mw: Middleware, job: JobContext, inner: Callable[[], Any]) -> Callable[[], Any]:
    return lambda: mw.run(job, inner)


def _abind(
    mw: Middleware, job: JobContext, inner: Callable[[], Awaitable[Any]]
) -> Callable[[], Awaitable[Any]]:
    return lambda: mw.arun(job, inner)
