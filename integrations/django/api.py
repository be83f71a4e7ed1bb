"""Django's task API, from wherever this project has it: `django.tasks` (Django >= 6.0) first, else the
`django-tasks` backport (Django 4.2-5.2). The one place that knows the two import paths and names."""

from __future__ import annotations

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

__all__ = [
    "BaseTaskBackend",
    "InvalidTask",
    "ResultDoesNotExist",
    "Task",
    "TaskContext",
    "TaskError",
    "TaskResult",
    "TaskResultStatus",
    "task_enqueued",
    "task_finished",
    "task_started",
]
