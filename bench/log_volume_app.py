"""The workers' app for bench/log_volume.py: every re-scan check and every job calls a downstream
service that fails every call, through one aiohttp session per worker process (README's HTTP check).

`--app log_volume_app` (bench/ on PYTHONPATH). Call n (a user id, or a job's payload["n"]) goes by
n % 4: 0 and 1 get HTTP 500 (raise_for_status raises), 2 a refused connection (a closed port), 3 no
answer until the client's timeout. The session has a bounded pool and a total timeout. Each process
writes its calls so far, by kind and outcome, to DUECAST_BENCH_CALLS/<pid>.json (at most once a second,
and at its stop), for the benchmark to count the attempts.
"""

from __future__ import annotations

import json
import os
import time
from collections import Counter
from pathlib import Path
from typing import Any

import aiohttp

from duecast import Registry, Row

SOURCE = "user_block_status"
TASK = "notify"
URL_ENV = "DUECAST_BENCH_DOWNSTREAM"  # the failing stub's base URL
REFUSED_ENV = "DUECAST_BENCH_REFUSED"  # a base URL nobody listens on
CALLS_ENV = "DUECAST_BENCH_CALLS"  # the folder of the per-process call counts
TIMEOUT_ENV = "DUECAST_BENCH_TIMEOUT_S"
POOL = 100  # connections per process (aiohttp's default, said out loud)

handlers = Registry()


class Downstream:
    """The process's session (opened on the worker's event loop) and its calls by (kind, outcome)."""

    session: aiohttp.ClientSession | None = None
    calls: Counter[str] = Counter()
    written_at = 0.0

    @classmethod
    def write(cls, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - cls.written_at < 1.0:
            return
        cls.written_at = now
        folder = Path(os.environ[CALLS_ENV])
        tmp = folder / f".{os.getpid()}.tmp"
        tmp.write_text(json.dumps(dict(cls.calls)))
        tmp.replace(folder / f"{os.getpid()}.json")  # whole or not at all for the reader


@handlers.on_start
async def open_session() -> None:
    timeout = aiohttp.ClientTimeout(total=float(os.environ.get(TIMEOUT_ENV, "5")))
    Downstream.session = aiohttp.ClientSession(timeout=timeout, connector=aiohttp.TCPConnector(limit=POOL))


@handlers.on_stop
async def close_session() -> None:
    if Downstream.session is not None:
        await Downstream.session.close()
    Downstream.write(force=True)


async def call(kind: str, n: int) -> None:
    """One call to the service; raises what the client raises (every call fails)."""
    assert Downstream.session is not None  # on_start opened it
    way = n % 4
    base = os.environ[REFUSED_ENV] if way == 2 else os.environ[URL_ENV]
    path = "hang" if way == 3 else "users"
    outcome = "ok"
    try:
        async with Downstream.session.get(f"{base}/{path}/{n}") as response:
            await response.read()
            response.raise_for_status()
    except Exception as exc:
        outcome = type(exc).__name__
        raise
    finally:
        Downstream.calls[f"{kind} {outcome}"] += 1
        Downstream.write()


@handlers.row(SOURCE, columns=["status"])
async def check(row: Row) -> None:
    await call("check", int(row["user_id"]))


@handlers.task(TASK)
async def notify(payload: Any) -> None:
    await call("job", int(payload["n"]))
