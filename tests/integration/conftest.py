"""Integration fixtures: a fresh source table per test on real MariaDB, with its store and queue."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pymysql
import pytest

from shared import migrate
from shared.db import Database
from shared.keys import Keys
from shared.queue import ReadyQueue, connect_redis
from shared.settings import MySQLSettings, RedisSettings, Settings, SourceSettings
from shared.store import SourceStore

pytestmark = pytest.mark.integration


@dataclass
class Env:
    settings: Settings
    source: SourceSettings
    store: SourceStore
    queue: ReadyQueue


def _create_table(cur: pymysql.cursors.Cursor, table: str, kind: str, rows: int) -> None:
    if kind == "rescan":
        cur.execute(
            f"CREATE TABLE `{table}` (user_id BIGINT PRIMARY KEY, status INT NOT NULL DEFAULT 1, "
            "updated_time DATETIME(6) NOT NULL)"
        )
        if rows:
            cur.execute(f"INSERT INTO `{table}` SELECT seq, 1, NOW(6) - INTERVAL 1 HOUR FROM seq_1_to_{rows}")
    else:
        cur.execute(
            f"CREATE TABLE `{table}` (id BIGINT PRIMARY KEY, payload VARCHAR(64) NOT NULL DEFAULT '', "
            "due_at DATETIME(6) NOT NULL)"
        )
        if rows:
            cur.execute(
                f"INSERT INTO `{table}` SELECT seq, '', NOW(6) - INTERVAL 1 SECOND FROM seq_1_to_{rows}"
            )


@pytest.fixture
def make_env(
    mysql_settings: MySQLSettings, redis_settings: RedisSettings, sql: pymysql.cursors.Cursor
) -> Iterator[Callable[..., Env]]:
    """make_env(kind="rescan"|"oneoff", rows=N, **source overrides) -> a migrated source ready to use.

    Uses MariaDB's seq_1_to_N tables to fill rows; "rescan" rows are all due (checked an hour ago).
    """
    made: list[Env] = []

    def make(kind: str = "rescan", rows: int = 0, **overrides: object) -> Env:
        table = f"t_{kind}_{uuid.uuid4().hex[:8]}"
        _create_table(sql, table, kind, rows)
        fields: dict[str, object] = (
            {"due_column": "updated_time", "id_column": "user_id", "period_s": 10, "on_success": "touch"}
            if kind == "rescan"
            else {"due_column": "due_at", "id_column": "id", "period_s": 0, "on_success": "delete"}
        )
        fields.update(overrides)
        source = SourceSettings(name=table.lower(), table=table, **fields)  # type: ignore[arg-type]
        settings = Settings(
            mysql=mysql_settings, redis=redis_settings, sources=[source], jobs={"enabled": False}
        )  # type: ignore[arg-type]
        migrate.apply(settings)
        store = SourceStore(Database(mysql_settings), source)
        store.verify()
        env = Env(
            settings,
            source,
            store,
            ReadyQueue(connect_redis(redis_settings), Keys(redis_settings.key_prefix)),
        )
        made.append(env)
        return env

    yield make
    for env in made:
        env.store.db.close()
        sql.execute(f"DROP TABLE IF EXISTS `{env.source.table}`")
