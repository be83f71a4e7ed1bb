"""The worker side: `duecast worker --app duecast.integrations.django.worker` runs Django tasks that
DuecastBackend enqueued. Importing it sets Django up (DJANGO_SETTINGS_MODULE); each task runs as
Django runs a request's code: old database connections closed before and after, signals sent."""

from __future__ import annotations

import functools
import os
import threading
from typing import Any

import django
from django.apps import apps
from django.db import connections
from django.db.backends.signals import connection_created
from django.utils import timezone
from django.utils.module_loading import import_string

from ...shared.api.context import current_job
from ...shared.api.handlers import Registry
from .api import Task, TaskContext, TaskResult, TaskResultStatus, task_finished, task_started
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
    task, sender, result = _started(call)
    _close_old_connections()  # this thread's connections may be stale from a task long ago
    try:
        value = task.call(*_args(task, result), **result.kwargs)
    except BaseException:
        _finished(result, TaskResultStatus.FAILED, sender)
        raise
    finally:
        _close_old_connections()
    _finished(result, TaskResultStatus.SUCCESSFUL, sender)
    return value


@handlers.task(ASYNC)
async def run_async(call: dict[str, Any]) -> Any:
    """An `async def` Django task, on the worker's event loop."""
    task, sender, result = _started(call)
    try:
        value = await task.acall(*_args(task, result), **result.kwargs)
    except BaseException:
        _finished(result, TaskResultStatus.FAILED, sender)
        raise
    _finished(result, TaskResultStatus.SUCCESSFUL, sender)
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


def _started(call: dict[str, Any]) -> tuple[Task, type, TaskResult]:
    """The Task the job names, and its TaskResult as Django's signals and TaskContext see it."""
    task, sender = _task(call["task"])
    job = current_job()
    now = timezone.now()
    result = TaskResult(
        task=task,
        id=str(job.id),
        status=TaskResultStatus.RUNNING,
        enqueued_at=None,
        started_at=now,
        finished_at=None,
        last_attempted_at=now,
        args=call.get("args", []),
        kwargs=call.get("kwargs", {}),
        backend=task.backend,
        errors=[],
        worker_ids=["duecast"] * job.attempt,
    )
    task_started.send(sender=sender, task_result=result)
    return task, sender, result


def _args(task: Task, result: TaskResult) -> list[Any]:
    return [TaskContext(task_result=result), *result.args] if task.takes_context else list(result.args)


def _finished(result: TaskResult, status: Any, sender: type) -> None:
    object.__setattr__(result, "status", status)
    object.__setattr__(result, "finished_at", timezone.now())
    task_finished.send(sender=sender, task_result=result)
