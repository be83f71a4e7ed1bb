"""The handler of bench/io_checks/http_check.py: each re-scan check is one GET to the stub service.

`--app http_app` (bench/io_checks on PYTHONPATH). The call is http_bare.fetch over one aiohttp
session per worker process with at most DUECAST_BENCH_HTTP_LIMIT connections, made on the first
check inside the worker's event loop: the same code the bare client loop runs.
"""

from __future__ import annotations

import asyncio
import atexit
import os

import aiohttp
from http_bare import aiohttp_session, fetch, raise_open_files

from duecast import Registry, Row

SOURCE = "user_block_status"
URL_ENV = "DUECAST_BENCH_HTTP_URL"
LIMIT_ENV = "DUECAST_BENCH_HTTP_LIMIT"

handlers = Registry()
raise_open_files()  # the session's connections, besides the worker's own


class Client:
    """The process's session. A session belongs to one event loop: should the worker ever run checks
    on another loop, that loop gets a session of its own."""

    session: aiohttp.ClientSession | None = None
    loop: asyncio.AbstractEventLoop | None = None
    url = os.environ.get(URL_ENV, "")

    @classmethod
    def get(cls) -> aiohttp.ClientSession:
        loop = asyncio.get_running_loop()
        if cls.session is None or cls.loop is not loop:
            cls.session, cls.loop = aiohttp_session(int(os.environ[LIMIT_ENV])), loop
        return cls.session


@atexit.register
def _close_session() -> None:
    """Close the session at exit, on its loop, once the worker has stopped that loop: unclosed, it
    logs errors ("Unclosed client session"). duecast has no shutdown hook for handler resources."""
    session, loop = Client.session, Client.loop
    if session is not None and loop is not None and not loop.is_running() and not loop.is_closed():
        loop.run_until_complete(session.close())


@handlers.row(SOURCE)
async def check(row: Row) -> None:
    """One call per user; anything but 200 fails the check (counted, retried at the next period)."""
    status = await fetch(Client.get(), f"{Client.url}/users/{row['user_id']}")
    if status != 200:
        raise RuntimeError(f"stub answered {status}")
