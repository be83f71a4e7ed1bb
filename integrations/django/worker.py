"""The worker side: `duecast worker --app duecast.integrations.django.worker` runs Django tasks that
DuecastBackend enqueued. Importing it sets Django up (DJANGO_SETTINGS_MODULE); each task runs as
Django runs a request's code: old database connections closed before and after, signals sent."""

from __future__ import annotations

import functools
import logging
import os
import threading
import time
import weakref
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import django
from django.apps import apps
from django.conf import settings
from django.db import connections
from django.db.backends.signals import connection_created
from django.utils import timezone
from django.utils.module_loading import import_string

from ...shared.api.context import current_job
from ...shared.api.handlers import Registry
from .api import (
    Task,
    TaskContext,
    TaskResult,
    TaskResultStatus,
    own_log_receivers,
    task_finished,
    task_started,
)
from .calls import ASYNC, PLAIN

if not apps.ready:
    if not os.environ.get("DJANGO_SETTINGS_MODULE"):
        raise ImportError(
            "duecast.integrations.django.worker needs DJANGO_SETTINGS_MODULE (your project's settings "
            "module, e.g. DJANGO_SETTINGS_MODULE=mysite.settings)"
        )
    django.setup()

handlers = Registry()


@handlers.task(PLAIN)
def run_plain(call: dict[str, Any]) -> Any:
    """A plain Django task, on a worker thread."""
    run = _started(call)
    _close_old_connections()  # this thread's connections may be stale from a task long ago
    try:
        value = run.task.call(*_args(run), **run.kwargs)
    except BaseException:
        _finished(run, TaskResultStatus.FAILED)
        raise
    finally:
        _close_old_connections()
    _finished(run, TaskResultStatus.SUCCESSFUL)
    return value


@handlers.task(ASYNC)
async def run_async(call: dict[str, Any]) -> Any:
    """An `async def` Django task, on the worker's event loop."""
    run = _started(call)
    try:
        value = await run.task.acall(*_args(run), **run.kwargs)
    except BaseException:
        _finished(run, TaskResultStatus.FAILED)
        raise
    _finished(run, TaskResultStatus.SUCCESSFUL)
    return value


# Django's close_old_connections, as around each request, costs a look-up in its connection handler's
# context-local store for every alias, twice per task: a third of a no-op task's time in the worker.
# It does nothing on a thread where no connection is open, so it is skipped when this thread's last
# pass left none open and no connection has been opened in the process since (connection_created is
# sent by every new connection, on whatever thread or context opens it).
_opened = [0]  # connections opened in this process: only ever counts up
_passes = threading.local()  # this thread's last pass: (_opened then, whether it left one open)


def _count_opened(**_: Any) -> None:
    _opened[0] += 1  # a lost update across threads still changes the count, which is all we read


connection_created.connect(_count_opened, weak=False, dispatch_uid="duecast.django.worker.opened")


def _close_old_connections() -> None:
    """Django's close_old_connections(), skipped when it has nothing to look at on this thread."""
    opened = _opened[0]  # read first: a connection opened during the pass makes the next one look
    if getattr(_passes, "last", None) == (opened, False):
        return
    left_open = False
    for conn in connections.all(initialized_only=True):
        conn.close_if_unusable_or_obsolete()
        left_open = left_open or conn.connection is not None
    _passes.last = (opened, left_open)


@functools.cache
def _task(path: str) -> tuple[Task, type]:
    """The Task at `path` and its backend's class (what signals are sent by), looked up once."""
    task = import_string(path)
    if not isinstance(task, Task):
        raise TypeError(f"{path} is not a Django task (decorate it with @task)")
    return task, type(task.get_backend())


@dataclass(slots=True)
class _Run:
    """One task's run. Its TaskResult is built only when something can see it: a TaskContext, or a
    signal that is sent (building it costs a no-op task a seventh of its time in the worker)."""

    task: Task
    sender: type  # the backend's class, which Django's signals are sent by
    call: dict[str, Any]
    started: float  # time.time() at the start: started_at, should a TaskResult be built
    attempt: int
    id: int
    result: TaskResult | None = None

    @property
    def args(self) -> list[Any]:
        return list(self.call.get("args", []))  # decoded JSON: what TaskResult would normalise it to

    @property
    def kwargs(self) -> dict[str, Any]:
        return dict(self.call.get("kwargs", {}))

    def task_result(self) -> TaskResult:
        if self.result is None:
            at = _aware(self.started)
            self.result = TaskResult(
                task=self.task,
                id=str(self.id),
                status=TaskResultStatus.RUNNING,
                enqueued_at=None,
                started_at=at,
                finished_at=None,
                last_attempted_at=at,
                args=self.args,
                kwargs=self.kwargs,
                backend=self.task.backend,
                errors=[],
                worker_ids=["duecast"] * self.attempt,
            )
        return self.result


def _aware(at: float) -> datetime:
    """A time.time() as Django's timezone.now() gives it (aware UTC under USE_TZ, else naive local)."""
    return datetime.fromtimestamp(at, tz=UTC) if settings.USE_TZ else datetime.fromtimestamp(at)


def _started(call: dict[str, Any]) -> _Run:
    """The run of the Task the job names; task_started sent if anything would see it."""
    task, sender = _task(call["task"])
    job = current_job()
    run = _Run(task, sender, call, time.time(), job.attempt, job.id)
    if not _unseen(task_started, logging.INFO):
        task_started.send(sender=sender, task_result=run.task_result())
    return run


def _args(run: _Run) -> list[Any]:
    if run.task.takes_context:
        return [TaskContext(task_result=run.task_result()), *run.task_result().args]
    return run.args


def _finished(run: _Run, status: Any) -> None:
    """task_finished sent if anything would see it (a failure is logged at ERROR by django-tasks)."""
    if _unseen(task_finished, logging.ERROR if status == TaskResultStatus.FAILED else logging.INFO):
        return
    result = run.task_result()
    object.__setattr__(result, "status", status)
    object.__setattr__(result, "finished_at", timezone.now())
    task_finished.send(sender=run.sender, task_result=result)


def _unseen(signal: Any, level: int) -> bool:
    """Whether sending `signal` now would do nothing anyone could see: its only receivers are
    django-tasks' (or Django's) own log receivers, and their logger drops lines of `level`. Any other
    receiver, a dead reference included, or a logger that would write, and the signal is sent."""
    own, logger = own_log_receivers()
    if logger is None or logger.isEnabledFor(level):
        return False
    for entry in signal.receivers:
        ref = entry[1]  # (lookup key, receiver or a weak reference to it[, is_async])
        receiver = ref() if isinstance(ref, weakref.ReferenceType) else ref
        if receiver is None or receiver not in own:
            return False
    return True
