"""The job a task is running for, as `duecast.current_job()` returns it inside the task.

Set by the Registry around each task call (a context variable, so each handler thread sees its own
job), never outside one: a task's signature stays `fn(payload)`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

_CURRENT: ContextVar[JobContext] = ContextVar("duecast_current_job")


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


def current_job() -> JobContext:
    """The job the calling task runs for. Raises LookupError outside a task a worker runs."""
    try:
        return _CURRENT.get()
    except LookupError:
        raise LookupError("duecast.current_job() is only known inside a task a duecast worker runs") from None


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
        meta=json.loads(row["meta"]) if row.get("meta") else {},
    )


@contextmanager
def running(job: JobContext) -> Iterator[None]:
    token = _CURRENT.set(job)
    try:
        yield
    finally:
        _CURRENT.reset(token)


def call_as(job: JobContext, fn: Callable[..., Any], *args: Any) -> Any:
    """fn(*args) with `job` as current_job() for its duration."""
    with running(job):
        return fn(*args)
