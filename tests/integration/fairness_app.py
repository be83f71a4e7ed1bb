"""Handler app for the fairness tests: one re-scan source and slow tasks on the same worker.

The re-scan's handler records when it checked each user, so a test can say, for any moment, which
users were checked within the period (plus slack) before it, without timing anything itself.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter
from typing import Any

from duecast import Registry, Row

handlers = Registry()
SOURCE = "fair_users"
SLOW_S = 2.0  # each task's run: the backlog of 2 s tasks
KEYED_S = 0.5  # each keyed_async run


class Log:
    """When each user was checked (time.monotonic()), and how many tasks ran."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.reset()

    def reset(self) -> None:
        with self.lock:
            self.checks: dict[int, list[float]] = {}
            self.tasks: Counter[str] = Counter()

    def checked(self, user: int) -> None:
        now = time.monotonic()
        with self.lock:
            self.checks.setdefault(user, []).append(now)

    def ran(self, task: str) -> None:
        with self.lock:
            self.tasks[task] += 1


LOG = Log()


@handlers.row(SOURCE)
async def check(row: Row) -> None:
    LOG.checked(int(row["user_id"]))


@handlers.row(f"{SOURCE}_plain")
def check_plain(row: Row) -> None:
    LOG.checked(int(row["user_id"]))


@handlers.batch(f"{SOURCE}_spans")
def check_spans(rows: list[Row]) -> None:
    """The demo's shape: a plain batch handler over a range-mode source."""
    for row in rows:
        LOG.checked(int(row["user_id"]))


@handlers.task("slow_async", timeout_s=30)
async def slow_async(payload: Any) -> None:
    await asyncio.sleep(SLOW_S)
    LOG.ran("slow_async")


@handlers.task("slow_plain", timeout_s=30)
def slow_plain(payload: Any) -> None:
    time.sleep(SLOW_S)
    LOG.ran("slow_plain")


@handlers.task("keyed_async", timeout_s=30)
async def keyed_async(payload: Any) -> None:
    """A job of one concurrency key (test_key_fairness.py): KEYED_S each."""
    await asyncio.sleep(KEYED_S)
    LOG.ran("keyed_async")
