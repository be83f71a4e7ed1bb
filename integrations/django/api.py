"""Django's task API, from wherever this project has it: `django.tasks` (Django >= 6.0) first, else the
`django-tasks` backport (Django 4.2-5.2). The one place that knows the two import paths and names."""

from __future__ import annotations

import functools
import logging
from typing import Any

try:  # Django >= 6.0
    from django.tasks import TaskContext, TaskResult, TaskResultStatus, exceptions, signals
    from django.tasks.backends.base import BaseTaskBackend
    from django.tasks.base import Task, TaskError
except ImportError:  # the backport
    from django_tasks import TaskContext, TaskResult, TaskResultStatus, exceptions, signals
    from django_tasks.backends.base import BaseTaskBackend
    from django_tasks.base import Task, TaskError

# Django 6 names it InvalidTask; the backport, InvalidTaskError.
InvalidTask: type[Exception] = getattr(exceptions, "InvalidTask", None) or exceptions.InvalidTaskError
ResultDoesNotExist: type[Exception] = exceptions.TaskResultDoesNotExist
task_enqueued: Any = signals.task_enqueued
task_started: Any = signals.task_started
task_finished: Any = signals.task_finished


@functools.cache
def own_log_receivers() -> tuple[frozenset[Any], logging.Logger | None]:
    """The log receivers the task API connects to its own signals, and the logger they write to
    (None: this version has no such logger, so nothing may assume they are quiet)."""
    logger = getattr(signals, "logger", None)
    names = ("log_task_enqueued", "log_task_started", "log_task_finished")
    own = frozenset(f for f in (getattr(signals, n, None) for n in names) if f is not None)
    return own, logger if isinstance(logger, logging.Logger) else None

__all__ = [
    "BaseTaskBackend",
    "InvalidTask",
    "ResultDoesNotExist",
    "Task",
    "TaskContext",
    "TaskError",
    "TaskResult",
    "TaskResultStatus",
    "own_log_receivers",
    "task_enqueued",
    "task_finished",
    "task_started",
]
