"""Issue 27.5: a worker's in-flight window fits a service of limited capacity, every worker setting at
its default. The check calls a service that takes 200 calls a second through a client pool (10
connections, 50 ms a call) with a 1 s timeout, as an aiohttp session would; the table asks for 750
checks a second. With the default cap alone (10,000 in flight), nearly every call waits in the pool
past its timeout; with the window, the failure share falls under 5% within a few periods."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from duecast.dispatcher import main as dispatcher_main
from duecast.shared.acks import Row
from duecast.shared.api.handlers import Handler
from duecast.shared.settings import WorkerSettings
from duecast.worker.worker import Worker
from tests.integration.conftest import Env
from tests.integration.flow.roles_helpers import role_settings
from tests.integration.flow.store_helpers import MakeEnv

pytestmark = pytest.mark.integration

USERS, PERIOD_S = 1500, 2.0  # 750 checks a second asked
CONNECTIONS, CALL_S, TIMEOUT_S = 10, 0.05, 1.0  # 200 calls a second taken
RUN_S = 14.0
SETTLED_AFTER_S = 8.0  # four periods


class Service:
    """The service behind its client pool: a call waits for one of CONNECTIONS, holds it CALL_S, and
    gives up after TIMEOUT_S (a waiter that gives up leaves the pool's queue, as aiohttp's do).
    Records each call's end: (monotonic time, succeeded)."""

    def __init__(self) -> None:
        self.pool: asyncio.Semaphore | None = None  # made on the worker's event loop
        self.calls: list[tuple[float, bool]] = []

    async def check(self, row: Row) -> None:
        if self.pool is None:
            self.pool = asyncio.Semaphore(CONNECTIONS)
        try:
            async with asyncio.timeout(TIMEOUT_S), self.pool:
                await asyncio.sleep(CALL_S)
        except TimeoutError:
            self.calls.append((time.monotonic(), False))
            raise
        self.calls.append((time.monotonic(), True))

    def failed_share(self, since: float, until: float) -> tuple[float, int]:
        window = [ok for at, ok in self.calls if since <= at < until]
        return (window.count(False) / len(window) if window else 1.0), len(window)


@contextmanager
def dispatching(env: Env) -> Iterator[None]:
    stop = threading.Event()
    thread = threading.Thread(target=dispatcher_main.serve, args=(role_settings(env), stop), daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(30)


# In scripts/dev test's serial phase: real seconds against a simulated service's capacity; beside the
# parallel phase's other processes (load 8 on 2 cores) the worker was not yet calling it within the
# first 2 s, so the overload this test starts from never happened (0% failed, where > 50% is asserted).
@pytest.mark.serial
def test_the_failure_share_falls_under_5_percent_against_a_service_of_limited_capacity(
    make_env: MakeEnv,
) -> None:
    env = make_env("rescan", rows=USERS, period_s=PERIOD_S)
    service = Service()
    name = env.source.name
    handler = Handler(name, None, batch=False, columns=("status",), afn=service.check)
    worker = Worker({name: env.store}, {name: handler}, env.queue, WorkerSettings(block_timeout_s=0.1))
    assert worker.settings.max_in_flight is None  # the default: the window adapts under the cap
    with dispatching(env):
        began = time.monotonic()
        try:
            while time.monotonic() - began < RUN_S:
                worker.tick()
        finally:
            worker.finish(5.0)
            worker.close()
    first, _ = service.failed_share(began, began + 2.0)
    settled, calls = service.failed_share(began + SETTLED_AFTER_S, began + RUN_S)
    assert first > 0.5  # the start: every row due at once, far more in flight than the pool serves in 1 s
    assert settled < 0.05, f"{settled:.1%} of {calls} calls failed after {SETTLED_AFTER_S:g} s"
    # ...and the service is kept busy: at least half its capacity used once settled
    assert calls >= 0.5 * (CONNECTIONS / CALL_S) * (RUN_S - SETTLED_AFTER_S)
    assert 1 <= worker.windows.limit(name) < 10_000
