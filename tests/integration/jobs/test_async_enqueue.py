"""Enqueueing from asyncio and from many threads: `aenqueue`/`apublish` never stall the event loop
(a probe task measures its lag), while MySQL answers or while it is unreachable, and one Enqueuer
shared by threads or by 200 concurrent tasks makes no error but duecast's own."""

from __future__ import annotations

import asyncio
import gc
import socket
import threading
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from typing import TypeVar

import pymysql
import pytest

from duecast import Enqueuer, Job, NotConnected, Publisher
from duecast.shared.fanout.client import connect_redis
from duecast.shared.settings import MySQLSettings, RedisSettings, Settings
from duecast.shared.storage.admin import migrate
from tests.unit.rules.test_handlers_async import arun

pytestmark = pytest.mark.integration

STALL_S = 0.05  # the longest the loop may go without running a ready task
# The tests that time the loop run in scripts/dev test's serial phase: beside the parallel phase's
# other processes on 2 cores, the scheduler alone kept this thread off a core for 151 ms.
timed_loop = pytest.mark.serial
T = TypeVar("T")


@pytest.fixture
def settings(
    mysql_settings: MySQLSettings, redis_settings: RedisSettings, sql: pymysql.cursors.Cursor
) -> Iterator[Settings]:
    table = f"jobs_{uuid.uuid4().hex[:8]}"
    topics = f"t{uuid.uuid4().hex[:8]}_"
    s = Settings(
        mysql=mysql_settings,
        redis=redis_settings,
        jobs={"table": table, "schedules_table": f"{table}_s"},  # type: ignore[arg-type]
        topics={"names": ["orders"], "table_prefix": topics},  # type: ignore[arg-type]
    )
    migrate.apply(s)
    yield s
    sql.execute(f"DROP TABLE IF EXISTS `{table}`, `{table}_s`, `{table}_runs`, `{table}_cursors`")
    sql.execute("SHOW TABLES LIKE %s", (f"{topics}%",))  # the topics' tables
    for (name,) in sql.fetchall():
        sql.execute(f"DROP TABLE IF EXISTS `{name}`")


def count(sql: pymysql.cursors.Cursor, table: str) -> int:
    sql.execute(f"SELECT COUNT(*) FROM `{table}`")
    return int(sql.fetchone()[0])


async def with_lag_probe(work: Callable[[], Awaitable[T]]) -> tuple[T, float]:
    """`work()`'s result and the loop's worst lag meanwhile: how late a 5 ms sleep woke, at most."""
    worst = 0.0
    done = asyncio.Event()

    async def probe() -> None:
        nonlocal worst
        while not done.is_set():
            began = time.perf_counter()
            await asyncio.sleep(0.005)
            worst = max(worst, time.perf_counter() - began - 0.005)

    # A full collection of this process's heap (pytest's and every module's: 50+ ms in a fresh
    # process here) may fall in any burst of allocations; it is not a wait for MySQL, which is what
    # this measures. Collected and frozen first, it cannot.
    gc.collect()
    gc.freeze()
    prober = asyncio.create_task(probe())
    try:
        return await work(), worst
    finally:
        done.set()
        await prober
        gc.unfreeze()


@timed_loop
def test_200_concurrent_aenqueues_and_apublishes_never_stall_the_loop(
    settings: Settings, sql: pymysql.cursors.Cursor
) -> None:
    enqueuer = Enqueuer(settings, connect_redis(settings.redis))
    publisher = Publisher(settings, connect_redis(settings.redis))

    async def work() -> list[object]:
        calls = [enqueuer.aenqueue("t", {"n": n}) for n in range(200)]
        calls.append(enqueuer.aenqueue_many([Job("t", {"batch": i}) for i in range(10)]))
        calls.extend(publisher.apublish("orders", {"n": n}) for n in range(50))
        return await asyncio.gather(*calls, return_exceptions=True)

    try:
        results, worst = arun(with_lag_probe(work))
    finally:
        enqueuer.close()
        publisher.close()
    errors = [r for r in results if isinstance(r, BaseException)]
    assert errors == []
    assert worst < STALL_S, f"the loop stalled {worst * 1000:.0f} ms"
    assert count(sql, settings.jobs.table) == 210
    assert sorted(results[201:]) == list(range(1, 51))  # type: ignore[type-var]  # gap-free ids


def test_8_threads_share_one_enqueuer_and_publisher(settings: Settings, sql: pymysql.cursors.Cursor) -> None:
    enqueuer = Enqueuer(settings, connect_redis(settings.redis))
    publisher = Publisher(settings, connect_redis(settings.redis))
    errors: list[BaseException] = []
    ids: list[int] = []

    def hammer(t: int) -> None:
        try:
            for n in range(40):
                enqueuer.enqueue("t", {"thread": t, "n": n})
                if n % 10 == 0:
                    enqueuer.enqueue_many([Job("t", i) for i in range(3)])
                ids.append(publisher.publish("orders", {"thread": t, "n": n}))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=hammer, args=(t,)) for t in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    enqueuer.close()
    publisher.close()
    assert errors == []
    assert count(sql, settings.jobs.table) == 8 * (40 + 4 * 3)
    assert sorted(ids) == list(range(1, 8 * 40 + 1))


def closed_port() -> int:
    """A port nothing listens on: bound, then closed."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@timed_loop
def test_while_mysql_is_unreachable_the_loop_never_waits(settings: Settings) -> None:
    mysql = settings.mysql.model_copy(
        update={"host": "127.0.0.1", "port": closed_port(), "unix_socket": None, "writer_retry_s": 1.0}
    )
    enqueuer = Enqueuer(settings.model_copy(update={"mysql": mysql}), None)

    async def work() -> list[object]:
        calls = [enqueuer.aenqueue("t", n) for n in range(16)]
        return await asyncio.gather(*calls, return_exceptions=True)

    began = time.monotonic()
    try:
        results, worst = arun(with_lag_probe(work))
    finally:
        enqueuer.close()
    assert all(isinstance(r, NotConnected) for r in results), {type(r).__name__ for r in results}
    assert "\n" not in str(results[0])
    assert time.monotonic() - began >= 1.0  # each call rode out writer_retry_s, off the loop
    assert worst < STALL_S, f"the loop stalled {worst * 1000:.0f} ms"
