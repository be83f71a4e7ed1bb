"""An app with start and stop hooks (plain and async) around plain and async tasks: every event is
appended to the file $HOOKS_LOG, one line each, so a test can read their order from another process.
The async hooks open and close an aiohttp session, as README's HTTP check does."""

from __future__ import annotations

import asyncio
import os
import threading
import time
from typing import Any

import aiohttp

from duecast import Registry

handlers = Registry()
_lock = threading.Lock()


class Http:
    session: aiohttp.ClientSession | None = None
    loop: asyncio.AbstractEventLoop | None = None


http = Http()


def note(event: str) -> None:
    with _lock, open(os.environ["HOOKS_LOG"], "a") as log:
        log.write(f"{os.getpid()} {event}\n")


@handlers.on_start
def start_plain() -> None:
    note("start-plain")


@handlers.on_start
async def start_async() -> None:
    http.session = aiohttp.ClientSession()
    http.loop = asyncio.get_running_loop()
    note("start-async")


@handlers.task("slow_async")
async def slow_async(payload: Any) -> None:
    note(f"begin {payload}")
    assert http.session is not None
    assert not http.session.closed
    assert asyncio.get_running_loop() is http.loop  # the session's own loop
    await asyncio.sleep(0.3)
    note(f"end {payload}")


@handlers.task("slow_plain")
def slow_plain(payload: Any) -> None:
    note(f"begin {payload}")
    time.sleep(0.3)
    note(f"end {payload}")


@handlers.on_stop
async def stop_async() -> None:
    assert http.session is not None
    await http.session.close()
    note("stop-async")


@handlers.on_stop
def stop_plain() -> None:
    note("stop-plain")
