"""The job a task is running for, as `duecast.current_job()` returns it inside the task.

Set by the Registry around each task call (a context variable, so each handler thread sees its own
job), never outside one: a task's signature stays `fn(payload)`. The jobs running in this process are
held here too, so a worker told of a cancel (worker/cancels.py) can flag the job and cancel its task.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar, Token
from dataclasses import dataclass, field
from datetime import datetime
from types import MappingProxyType
from typing import Any

_CURRENT: ContextVar[JobContext | _Unbuilt] = ContextVar("duecast_current_job")


class _Unbuilt:
    """A plain task's job whose JobContext is built on the first current_job() (call_row_as): most
    tasks never ask, and building one costs about as much as the rest of a no-op task's call."""

    __slots__ = ("job", "row")

    def __init__(self, row: dict[str, Any]) -> None:
        self.row = row
        self.job: JobContext | None = None

    def built(self) -> JobContext:
        if self.job is None:
            self.job = job_context(self.row)
        return self.job


class _Held:
    """A job running in this process: whether it was cancelled, and its asyncio task (async def)."""

    __slots__ = ("cancelled", "task")

    def __init__(self, task: asyncio.Task[Any] | None) -> None:
        self.cancelled = False
        self.task = task


_HELD: dict[int, _Held] = {}  # job id -> its run in this process, while its task runs
_HELD_LOCK = threading.Lock()
_NO_META: Mapping[str, str] = MappingProxyType({})  # shared by every job that carries none (read-only)


@dataclass(frozen=True)
class JobContext:
    id: int  # the job's id in the jobs table, as enqueue() returned it
    attempt: int  # this run's delivery number: 1 the first time, one more for each retry or redelivery
    queue: str
    task: str
    enqueued_at: datetime  # the job's created_at: naive, in the database's time zone (NOW()'s)
    errors: int  # failed runs before this one
    max_attempts: int  # errors at which the job is dead
    meta: Mapping[str, str] = field(default_factory=dict)  # what enqueue middleware carried

    @property
    def cancelled(self) -> bool:
        """Whether the job was cancelled while this run goes on (Enqueuer.cancel, `duecast jobs
        cancel`): its worker learns of it within about jobs.lease_s/3. A plain task may check it
        and stop early; whatever it then returns or raises is stale and never retried."""
        held = _HELD.get(self.id)
        return held is not None and held.cancelled


def current_job() -> JobContext:
    """The job the calling task runs for. Raises LookupError outside a task a worker runs."""
    try:
        job = _CURRENT.get()
    except LookupError:
        raise LookupError("duecast.current_job() is only known inside a task a duecast worker runs") from None
    return job.built() if isinstance(job, _Unbuilt) else job


def job_context(row: dict[str, Any]) -> JobContext:
    """The context of a job row as the worker read it (shared/queries/jobs.py JOB_COLUMNS)."""
    created = row["created_at"]
    return JobContext(
        id=int(row["id"]),
        attempt=int(row["dc_attempt"]),
        queue=str(row["queue"]),
        task=str(row["task"]),
        # the packed read (JSON) gives it as text, the plain read as a datetime
        enqueued_at=created if isinstance(created, datetime) else datetime.fromisoformat(str(created)),
        errors=int(row["errors"]),
        max_attempts=int(row["max_attempts"]),
        meta=json.loads(row["meta"]) if row.get("meta") else _NO_META,
    )


@contextmanager
def running(job: JobContext, task: asyncio.Task[Any] | None = None) -> Iterator[None]:
    """`job` as current_job() and held for a cancel inside the block; `task`: an `async def` job's
    asyncio task (asyncio.current_task()), which a cancel cancels."""
    token, held = _enter(job.id, job, task)
    try:
        yield
    finally:
        _leave(job.id, token, held)


def _enter(
    job_id: int, job: JobContext | _Unbuilt, task: asyncio.Task[Any] | None
) -> tuple[Token[JobContext | _Unbuilt], _Held]:
    token = _CURRENT.set(job)
    held = _Held(task)
    with _HELD_LOCK:
        _HELD[job_id] = held
    return token, held


def _leave(job_id: int, token: Token[JobContext | _Unbuilt], held: _Held) -> None:
    _CURRENT.reset(token)
    with _HELD_LOCK:
        if _HELD.get(job_id) is held:
            del _HELD[job_id]


def held_jobs() -> list[int]:
    """The ids of the jobs whose tasks run in this process now, not yet told of a cancel."""
    with _HELD_LOCK:
        return [i for i, h in _HELD.items() if not h.cancelled]


def cancel_held(ids: Iterable[int]) -> int:
    """Flag these jobs cancelled (`JobContext.cancelled`) and cancel the asyncio task of each
    `async def` one, on its own loop; returns how many were newly told (the others ended here,
    never ran here, or were told already)."""
    with _HELD_LOCK:
        told = [h for h in (_HELD.get(i) for i in ids) if h is not None and not h.cancelled]
        for h in told:
            h.cancelled = True
    for h in told:
        if h.task is not None:
            h.task.get_loop().call_soon_threadsafe(h.task.cancel)
    return len(told)


def call_as(job: JobContext, fn: Callable[..., Any], *args: Any) -> Any:
    """fn(*args) with `job` as current_job() for its duration, on a handler thread (a plain task: no
    asyncio task to cancel). Written out rather than `with running(job)`: this is every plain task's
    path, and a generator-based context manager cost as much as the rest of it (bench/job_path.py)."""
    token, held = _enter(job.id, job, None)
    try:
        return fn(*args)
    finally:
        _leave(job.id, token, held)


def call_row_as(row: dict[str, Any], fn: Callable[..., Any], *args: Any) -> Any:
    """call_as for the job of `row`, its JobContext built only if the task asks for it."""
    job_id = int(row["id"])
    token, held = _enter(job_id, _Unbuilt(row), None)
    try:
        return fn(*args)
    finally:
        _leave(job_id, token, held)
