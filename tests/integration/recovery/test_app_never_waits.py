"""Issue 12.4: the application is never held up by duecast. While a 2 s check runs on a row, the
application's own UPDATE of that business row commits at once (< 100 ms), in row mode and range mode:
no transaction and no row or span lock is open while a handler runs."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import cast

import pymysql
import pytest

from duecast.shared.acks import Ack, Row
from duecast.shared.api.handlers import Handler
from duecast.shared.fanout.client import connect_redis
from duecast.shared.fanout.keys import Keys
from duecast.shared.fanout.queue import ReadyQueue
from duecast.shared.process.runtime import build_stores
from duecast.shared.queries.ranges import ranges_table
from duecast.shared.settings import MySQLSettings, RedisSettings, Settings, WorkerSettings
from duecast.shared.storage.admin import migrate
from duecast.shared.storage.range_store import RangeStore
from duecast.shared.storage.source_store import Store
from duecast.worker.worker import Worker
from tests.integration import range_app
from tests.integration.conftest import Env
from tests.integration.flow.store_helpers import MakeEnv

pytestmark = pytest.mark.integration

SLOW_ID = 5
CHECK_S = 2.0  # the slow check
APP_LIMIT_S = 0.1  # what the application's UPDATE may take meanwhile


class SlowCheck:
    """A sync row handler whose check of SLOW_ID takes CHECK_S; says when it is inside that check."""

    def __init__(self, id_column: str) -> None:
        self.id_column = id_column
        self.inside = threading.Event()
        self.done = threading.Event()

    def __call__(self, row: Row) -> Ack | None:
        if int(row[self.id_column]) == SLOW_ID:
            self.inside.set()
            time.sleep(CHECK_S)  # the check itself: a call that takes 2 s
            self.done.set()
        return None


def app_update_while_checked(
    store: Store, queue: ReadyQueue, sql: pymysql.cursors.Cursor, table: str, id_column: str
) -> float:
    """Run one worker tick over what is queued, with SLOW_ID's check taking CHECK_S; while it runs,
    UPDATE that row as the application would (its own autocommit session). Returns the seconds the
    UPDATE took; asserts the check really was running across it."""
    check = SlowCheck(id_column)
    name = store.src.name
    handler = Handler(name, check, batch=False, columns=("status",))
    worker = Worker({name: store}, {name: handler}, queue, WorkerSettings(block_timeout_s=0.1))
    errors: list[BaseException] = []

    def tick() -> None:  # as --drain runs it: until nothing is in flight or left to pop
        try:
            while not worker.tick().idle:
                pass
        except BaseException as exc:
            errors.append(exc)
        finally:
            worker.close()

    thread = threading.Thread(target=tick, daemon=True)
    thread.start()
    try:
        assert check.inside.wait(30), "the slow check never started"
        began = time.perf_counter()
        sql.execute(f"UPDATE `{table}` SET status = 9 WHERE `{id_column}` = %s", (SLOW_ID,))
        took = time.perf_counter() - began
        assert not check.done.is_set(), "the check was over before the UPDATE committed"
    finally:
        thread.join(30)
    assert not thread.is_alive()
    assert errors == []
    assert worker.counts["failed"] == 0
    return took


def test_row_mode_never_holds_up_the_applications_update(
    make_env: MakeEnv, sql: pymysql.cursors.Cursor
) -> None:
    env: Env = make_env("rescan", rows=10)
    env.queue.push(env.source.name, env.store.claim_due(100))

    took = app_update_while_checked(cast(Store, env.store), env.queue, sql, env.table, "user_id")

    assert took < APP_LIMIT_S, f"the application's UPDATE waited {took:.3f}s for duecast"
    assert env.states() == {i: (0, 1) for i in range(1, 11)}  # every check acked after all
    assert dict(env.query("SELECT {pk}, status FROM {t}"))[SLOW_ID] == 9  # the application's write stays


@pytest.fixture
def ranged(
    mysql_settings: MySQLSettings, redis_settings: RedisSettings, sql: pymysql.cursors.Cursor
) -> Iterator[Settings]:
    src = range_app.users_source(sql, 30, range_size=100)
    settings = Settings(
        mysql=mysql_settings,
        redis=redis_settings,
        sources=[src],
        jobs={"enabled": False},  # type: ignore[arg-type]
    )
    migrate.apply(settings)
    yield settings
    sql.execute(f"DROP TABLE IF EXISTS `{src.table}`, `{ranges_table(src)}`")


def test_range_mode_never_holds_up_the_applications_update(
    ranged: Settings, sql: pymysql.cursors.Cursor
) -> None:
    (store,) = build_stores(ranged, ranged.sources)
    assert isinstance(store, RangeStore)
    store.verify()
    store.discover(full=True)
    queue = ReadyQueue(connect_redis(ranged.redis), Keys(ranged.redis.key_prefix))
    queue.push(store.src.name, store.claim_due(100))
    table = ranged.sources[0].table

    took = app_update_while_checked(cast(Store, store), queue, sql, table, "user_id")

    assert took < APP_LIMIT_S, f"the application's UPDATE waited {took:.3f}s for duecast"
    sql.execute(f"SELECT dc_state, rows_seen FROM `{ranges_table(ranged.sources[0])}`")
    assert sql.fetchall() == ((0, 30),)  # the span was checked and acked after all
    sql.execute(f"SELECT status FROM `{table}` WHERE user_id = %s", (SLOW_ID,))
    assert sql.fetchone() == (9,)
    queue.client.close()
    store.db.close()
