"""Tasks for the cancel tests: each records, by payload, that it started and how it ended, so a test
can wait for a start and see whether a cancel reached the task (tests/integration/jobs/test_job_cancel.py).
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

from duecast import Registry, current_job

handlers = Registry()
_lock = threading.Lock()
EVENTS: list[tuple[Any, str, float]] = []  # (payload, what happened, monotonic time)
WAIT_S = 30.0  # how long a task waits for its cancel before it gives up (a failing test, not a hang)


def record(payload: Any, what: str) -> None:
    with _lock:
        EVENTS.append((payload, what, time.monotonic()))


def seen(payload: Any) -> list[str]:
    with _lock:
        return [what for p, what, _ in EVENTS if p == payload]


def at(payload: Any, what: str) -> float:
    with _lock:
        return next(t for p, w, t in EVENTS if p == payload and w == what)


@handlers.task("sleep_async")
async def sleep_async(payload: Any) -> None:
    record(payload, "started")
    try:
        await asyncio.sleep(WAIT_S)
    except asyncio.CancelledError:
        record(payload, "cancelled")
        raise
    record(payload, "slept")


@handlers.task("wait_plain")
def wait_plain(payload: Any) -> None:
    """Runs until it sees its job cancelled, then fails: a failure that would be retried, were its
    finish not stale."""
    record(payload, "started")
    job = current_job()
    deadline = time.monotonic() + WAIT_S
    while not job.cancelled and time.monotonic() < deadline:
        time.sleep(0.02)
    record(payload, "saw cancelled" if job.cancelled else "never told")
    raise RuntimeError("stopping: my job was cancelled")


@handlers.task("quick")
def quick(payload: Any) -> None:
    record(payload, "ran")
