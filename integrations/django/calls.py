"""How a Django task travels as a duecast job, both ways: the job's task name and JSON payload, the
priority scale, and a job's outcome as Django's TaskResult. Pure: no I/O, nothing Django runs."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

PLAIN = "django"  # the duecast task that runs a plain Django task (on a worker thread)...
ASYNC = "django.async"  # ...and an `async def` one (on the worker's event loop)
DJANGO_MIN, DJANGO_MAX = -100, 100  # Django's priorities: larger runs first
_LAST_LINE = re.compile(r"^([A-Za-z_][\w.]*)(?::|$)")


def payload(module_path: str, args: Any, kwargs: Any) -> dict[str, Any]:
    """The job's payload: which task, and its JSON-normalised arguments."""
    return {"task": module_path, "args": list(args), "kwargs": dict(kwargs)}


def duecast_priority(priority: int) -> int:
    """Django's -100..100 (100 first) onto duecast's 0..9 (0 first), in order."""
    clamped = min(DJANGO_MAX, max(DJANGO_MIN, int(priority)))
    return round((DJANGO_MAX - clamped) * 9 / (DJANGO_MAX - DJANGO_MIN))


def status_of(state: str, statuses: Any) -> Any:
    """A duecast job state as a TaskResultStatus: a pending job (waiting, or running in a run) is READY;
    a cancelled one FAILED (Django's API has no cancelled status: it did not succeed, and never will)."""
    finished = {"done": statuses.SUCCESSFUL, "dead": statuses.FAILED, "cancelled": statuses.FAILED}
    return finished.get(state, statuses.READY)


def exception_path(last_error: str) -> str:
    """The exception class a traceback ends with, as an import path (`builtins.ValueError` for a
    builtin; a discard's reason, which names none, reads as `builtins.Exception`)."""
    for line in reversed(last_error.strip().splitlines()):
        found = _LAST_LINE.match(line.strip())
        if found and not line.startswith(" "):
            name = found.group(1)
            return name if "." in name else f"builtins.{name}"
    return "builtins.Exception"


def aware(value: datetime | None) -> datetime | None:
    """A naive DATETIME duecast wrote with NOW(6) as the aware datetime Django's TaskResult holds: the
    server's time zone is taken to be UTC (docs/django.md says to keep it so)."""
    if value is None or value.tzinfo is not None:
        return value
    return value.replace(tzinfo=UTC)
