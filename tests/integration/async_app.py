"""Async handlers for the event-loop tests: tasks, a row handler, a batch handler and a consumer.

Each records what it ran and how many of its calls were awaiting at once (the peak), so a test can
tell calls that overlapped from calls that ran one after another without timing anything.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter
from typing import Any

from duecast import Ack, Message, Registry, Row, current_job

handlers = Registry()
_lock = threading.Lock()


class Tally:
    """Runs per key, and the most calls in flight at once."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        with _lock:
            self.runs: Counter[Any] = Counter()
            self.now = 0
            self.peak = 0
            self.jobs: dict[Any, int] = {}  # payload -> current_job().id seen inside the task

    def enter(self, key: Any) -> None:
        with _lock:
            self.runs[key] += 1
            self.now += 1
            self.peak = max(self.peak, self.now)

    def leave(self) -> None:
        with _lock:
            self.now -= 1


TALLY = Tally()
NEVER = asyncio.Event()  # what a hanging handler awaits


@handlers.task("wait")
async def wait(payload: Any) -> None:
    TALLY.enter(payload)
    try:
        TALLY.jobs[payload] = current_job().id
        await asyncio.sleep(0.2)
    finally:
        TALLY.leave()


@handlers.task("hang", timeout_s=0.5)
async def hang(payload: Any) -> None:
    TALLY.enter(payload)
    try:
        await NEVER.wait()
    finally:
        TALLY.leave()


@handlers.task("block", timeout_s=0.5)
def block(payload: Any) -> None:
    """A plain task stuck in a blocking call: given up at its timeout, its thread left to finish."""
    TALLY.enter(payload)
    try:
        time.sleep(3.0)
    finally:
        TALLY.leave()


@handlers.task("plain")
def plain(payload: Any) -> None:
    TALLY.enter(payload)
    TALLY.leave()


@handlers.row("checks", columns=["status"])
async def check(row: Row) -> Ack | None:
    TALLY.enter(("row", row["id"]))
    try:
        await asyncio.sleep(0.2)
        if row["status"] == "hang":
            await NEVER.wait()
        return Ack.touch(status="seen")
    finally:
        TALLY.leave()


@handlers.batch("batched", columns=["status"])
async def check_all(rows: list[Row]) -> list[Ack | None]:
    for row in rows:
        TALLY.enter(("batch", row["id"]))
    await asyncio.sleep(0.1)
    for _ in rows:
        TALLY.leave()
    return [Ack.touch(status="batched") for _ in rows]


@handlers.consumer("orders", group="billing")
async def bill(message: Message) -> None:
    TALLY.enter(("message", message.payload["n"]))
    try:
        await asyncio.sleep(0.2)
    finally:
        TALLY.leave()
