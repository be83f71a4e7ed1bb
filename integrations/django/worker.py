"""The worker side: `duecast worker --app duecast.integrations.django.worker` runs Django tasks that
DuecastBackend enqueued. Importing it sets Django up (DJANGO_SETTINGS_MODULE); each task runs as
Django runs a request's code: old database connections closed before and after, signals sent."""

from __future__ import annotations

import functools
import logging
import os
import time
import weakref
from datetime import UTC, datetime
from inspect import iscoroutinefunction
from threading import get_ident
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
# Read once: on Python 3.11 an Enum class's attribute goes through its metaclass's __getattr__ hook (a
# tenth of a no-op task's own cost, for two reads), and the module attributes are looked up each time.
_SUCCESSFUL, _FAILED = TaskResultStatus.SUCCESSFUL, TaskResultStatus.FAILED
_INFO, _ERROR = logging.INFO, logging.ERROR
_OWN_LOG_RECEIVERS, _TASKS_LOGGER = own_log_receivers()  # fixed once the task API is imported


@handlers.task(PLAIN)
def run_plain(call: dict[str, Any]) -> Any:
    """A plain Django task, on a worker thread."""
    known, started = _known(call["task"]), time.time()
    # A plain function that nothing watches start (the common case) goes without _started's call.
    result = None if known.direct and _unseen(task_started, _INFO) else _started(known, call, started)
    _close_old_connections()  # this thread's connections may be stale from a task long ago
    try:
        if known.direct:
            # What Task.call does for a plain function (no async_to_sync), without its per-call
            # iscoroutinefunction(); args and kwargs are this job's own freshly decoded JSON (what
            # TaskResult would normalise them to), unpacked into the call's own tuple and dict.
            value = known.task.func(*call.get("args", ()), **call.get("kwargs", {}))
        else:
            value = known.task.call(*_args(known, call, result), **call.get("kwargs", {}))
    except BaseException:
        if not _unseen(task_finished, _ERROR):  # a failure is logged at ERROR by django-tasks
            _finished(known, call, started, result, _FAILED)
        raise
    finally:
        _close_old_connections()
    if not _unseen(task_finished, _INFO):
        _finished(known, call, started, result, _SUCCESSFUL)
    return value


@handlers.task(ASYNC)
async def run_async(call: dict[str, Any]) -> Any:
    """An `async def` Django task, on the worker's event loop."""
    known, started = _known(call["task"]), time.time()
    result = _started(known, call, started)
    try:
        value = await known.task.acall(*_args(known, call, result), **call.get("kwargs", {}))
    except BaseException:
        if not _unseen(task_finished, _ERROR):
            _finished(known, call, started, result, _FAILED)
        raise
    if not _unseen(task_finished, _INFO):
        _finished(known, call, started, result, _SUCCESSFUL)
    return value


# Django's close_old_connections, as around each request, costs a look-up in its connection handler's
# context-local store for every alias, twice per task: a third of a no-op task's time in the worker.
# It does nothing on a thread where no connection is open, so it is skipped when this thread's last
# pass left none open and no connection has been opened in the process since (connection_created is
# sent by every new connection, on whatever thread or context opens it).
_opened = [0]  # connections opened in this process: only ever counts up
# Per thread (by its ident, a cheaper read than a threading.local's): _opened at its last pass if that
# left none open, else -1. A thread started later under a dead one's ident inherits its entry, rightly:
# a new thread has no connection of its own, and one it opens counts up _opened.
_clean: dict[int, int] = {}


def _count_opened(**_: Any) -> None:
    _opened[0] += 1  # a lost update across threads still changes the count, which is all we read


connection_created.connect(_count_opened, weak=False, dispatch_uid="duecast.django.worker.opened")


def _close_old_connections() -> None:
    """Django's close_old_connections(), skipped when it has nothing to look at on this thread."""
    opened = _opened[0]  # read first: a connection opened during the pass makes the next one look
    if _clean.get(get_ident(), -1) == opened:
        return
    left_open = False
    for conn in connections.all(initialized_only=True):
        conn.close_if_unusable_or_obsolete()
        left_open = left_open or conn.connection is not None
    _clean[get_ident()] = -1 if left_open else opened


class _Known:
    """What a task path names, looked up once per path and process (import_string, its backend, and
    whether its function may be called directly): a Task is a frozen dataclass, so none of it changes."""

    __slots__ = ("direct", "sender", "task")

    def __init__(self, task: Task) -> None:
        self.task = task
        self.sender: type = type(task.get_backend())  # the backend's class, which signals are sent by
        # A plain function with no TaskContext: Task.call would only call it.
        self.direct = not task.takes_context and not iscoroutinefunction(task.func)


@functools.cache
def _known(path: str) -> _Known:
    task = import_string(path)
    if not isinstance(task, Task):
        raise TypeError(f"{path} is not a Django task (decorate it with @task)")
    return _Known(task)


def _task_result(known: _Known, call: dict[str, Any], started: float) -> TaskResult:
    """The run's TaskResult, built only when something can see it: a TaskContext, or a signal that
    is sent (building it costs a no-op task a seventh of its time in the worker)."""
    job = current_job()
    at = _aware(started)
    return TaskResult(
        task=known.task,
        id=str(job.id),
        status=TaskResultStatus.RUNNING,
        enqueued_at=None,
        started_at=at,
        finished_at=None,
        last_attempted_at=at,
        args=list(call.get("args", [])),  # decoded JSON: what TaskResult would normalise it to
        kwargs=dict(call.get("kwargs", {})),
        backend=known.task.backend,
        errors=[],
        worker_ids=["duecast"] * job.attempt,
    )


def _aware(at: float) -> datetime:
    """A time.time() as Django's timezone.now() gives it (aware UTC under USE_TZ, else naive local)."""
    return datetime.fromtimestamp(at, tz=UTC) if settings.USE_TZ else datetime.fromtimestamp(at)


def _started(known: _Known, call: dict[str, Any], started: float) -> TaskResult | None:
    """task_started sent if anything would see it; the run's TaskResult if one was built (for that
    signal or a TaskContext), else None."""
    if not _unseen(task_started, _INFO):
        result = _task_result(known, call, started)
        task_started.send(sender=known.sender, task_result=result)
        return result
    return _task_result(known, call, started) if known.task.takes_context else None


def _args(known: _Known, call: dict[str, Any], result: TaskResult | None) -> list[Any]:
    if known.task.takes_context:
        assert result is not None  # _started builds it for a TaskContext
        return [TaskContext(task_result=result), *result.args]
    return list(call.get("args", ()))


def _finished(
    known: _Known, call: dict[str, Any], started: float, result: TaskResult | None, status: Any
) -> None:
    """task_finished sent, once the caller found that something would see it (_unseen)."""
    if result is None:
        result = _task_result(known, call, started)
    object.__setattr__(result, "status", status)
    object.__setattr__(result, "finished_at", timezone.now())
    task_finished.send(sender=known.sender, task_result=result)


def _unseen(signal: Any, level: int) -> bool:
    """Whether sending `signal` now would do nothing anyone could see: its only receivers are
    django-tasks' (or Django's) own log receivers, and their logger drops lines of `level`. Any other
    receiver, a dead reference included, or a logger that would write, and the signal is sent."""
    own, logger = _OWN_LOG_RECEIVERS, _TASKS_LOGGER
    if logger is None or logger.isEnabledFor(level):
        return False
    for entry in signal.receivers:
        ref = entry[1]  # (lookup key, receiver or a weak reference to it[, is_async])
        receiver = ref() if isinstance(ref, weakref.ReferenceType) else ref
        if receiver is None or receiver not in own:
            return False
    return True
