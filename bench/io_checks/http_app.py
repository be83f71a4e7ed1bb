"""The handler of bench/io_checks/http_check.py: each re-scan check is one GET to the stub service.

`--app http_app` (bench/io_checks on PYTHONPATH). The call is http_bare.fetch over one aiohttp
session per worker process with at most DUECAST_BENCH_HTTP_LIMIT connections, opened and closed by
the app's start and stop hooks on the worker's event loop: the same code the bare client loop runs.
"""

from __future__ import annotations

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
    """The process's session, opened on the worker's event loop before the first check and closed
    after the last one (Registry.on_start / on_stop), so none is left unclosed at the worker's stop."""

    session: aiohttp.ClientSession | None = None
    url = os.environ.get(URL_ENV, "")


@handlers.on_start
async def open_session() -> None:
    Client.session = aiohttp_session(int(os.environ[LIMIT_ENV]))


@handlers.on_stop
async def close_session() -> None:
    if Client.session is not None:
        await Client.session.close()


@handlers.row(SOURCE, columns=["status"])
async def check(row: Row) -> None:
    """One call per user; anything but 200 fails the check (counted, retried at the next period)."""
    assert Client.session is not None  # on_start opened it
    status = await fetch(Client.session, f"{Client.url}/users/{row['user_id']}")
    if status != 200:
        raise RuntimeError(f"stub answered {status}")
