"""The duecast workers' handler module for the peer benchmark: the jobs of each workload, as tasks."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from harness import IO_WAIT_S

from duecast import Registry

handlers = Registry()


@handlers.task("noop")
def noop(payload: Any) -> None:
    """Does nothing: returning None acks the job with the jobs source's default (delete the row)."""


@handlers.task("wait")
async def wait(payload: Any) -> None:
    """The I/O workload, written as duecast recommends: an async task (many in flight per worker)."""
    await asyncio.sleep(IO_WAIT_S)


@handlers.task("wait_sync")
def wait_sync(payload: Any) -> None:
    """The same wait in a plain function: one worker thread blocked per job in flight."""
    time.sleep(IO_WAIT_S)
