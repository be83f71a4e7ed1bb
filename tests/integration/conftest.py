"""Integration fixtures: a fresh source table per test on real MariaDB, with its store and queue.

Everything a test arranges or asserts goes through SQL on its own table and Redis keys under its own
prefix; time passes by back-dating columns, never by sleeping.
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pymysql
import pytest

from duecast.shared.fanout.client import connect_redis
from duecast.shared.fanout.keys import Keys
from duecast.shared.fanout.queue import ReadyQueue
from duecast.shared.settings import MySQLSettings, RedisSettings, Settings, SourceSettings
from duecast.shared.storage.admin import migrate
from duecast.shared.storage.db import Database
from duecast.shared.storage.source_store import SourceStore
from tests.integration import apps

pytestmark = pytest.mark.integration


@dataclass
class Env:
    settings: Settings
    source: SourceSettings
    store: SourceStore
    queue: ReadyQueue
    sql: pymysql.cursors.Cursor  # autocommit, for arranging and asserting rows
    extra_dbs: list[Database] = field(default_factory=list)

    @property
    def table(self) -> str:
        return self.source.table

    @property
    def id_column(self) -> str:
        return self.source.id_column

    def query(self, stmt: str, args: Any = None) -> list[tuple[Any, ...]]:
        """Run `stmt` (use `{t}` for the table, `{pk}` for its id column) and return every row."""
        self.sql.execute(stmt.format(t=f"`{self.table}`", pk=f"`{self.id_column}`"), args)
        return list(self.sql.fetchall())

    def scalar(self, stmt: str, args: Any = None) -> Any:
        return self.query(stmt, args)[0][0]

    def states(self) -> dict[int, tuple[int, int]]:
        """id -> (dc_state, dc_attempt) for every row."""
        return {
            int(i): (int(s), int(a)) for i, s, a in self.query("SELECT {pk}, dc_state, dc_attempt FROM {t}")
        }

    def count(self, where: str = "1", args: Any = None) -> int:
        return int(self.scalar("SELECT COUNT(*) FROM {t} WHERE " + where, args))

    def db_now(self) -> dt.datetime:
        """The server's NOW(6): every due-ness decision is made on this clock, not the client's."""
        return self.scalar("SELECT NOW(6)")  # type: ignore[no-any-return]

    def backdate_dispatch(self, seconds: float = 3600, where: str = "dc_state = 1") -> int:
        """Age dispatched rows past any visibility timeout (time passes in SQL, not by sleeping)."""
        self.sql.execute(
            f"UPDATE `{self.table}` SET dc_dispatched_at = dc_dispatched_at - INTERVAL %s MICROSECOND "
            f"WHERE {where}",
            (round(seconds * 1e6),),
        )
        return int(self.sql.rowcount)

    def other_store(self, **mysql: Any) -> SourceStore:
        """A second store for the same source on its own connection (a second process, in effect)."""
        db = Database(self.settings.mysql.model_copy(update=mysql))
        self.extra_dbs.append(db)
        store = SourceStore(db, self.source)
        store.verify()
        return store


def create_table(cur: pymysql.cursors.Cursor, table: str, kind: str, rows: int) -> None:
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
                f"INSERT INTO `{table}` SELECT seq, CONCAT('p', seq), NOW(6) - INTERVAL 1 SECOND "
                f"FROM seq_1_to_{rows}"
            )


def source_fields(kind: str) -> dict[str, object]:
    if kind == "rescan":
        return {"due_column": "updated_time", "id_column": "user_id", "period_s": 10, "on_success": "touch"}
    return {"due_column": "due_at", "id_column": "id", "period_s": 0, "on_success": "delete"}


@pytest.fixture
def tables(sql: pymysql.cursors.Cursor) -> Iterator[Callable[..., str]]:
    """tables(kind="rescan"|"oneoff", rows=N) -> the name of a new, unmigrated table (dropped after)."""
    made: list[str] = []

    def make(kind: str = "rescan", rows: int = 0, prefix: str = "t") -> str:
        table = f"{prefix}_{kind}_{uuid.uuid4().hex[:8]}"
        made.append(table)
        create_table(sql, table, kind, rows)
        return table

    yield make
    for table in made:
        sql.execute(f"DROP TABLE IF EXISTS `{table}`")


@pytest.fixture
def make_env(
    mysql_settings: MySQLSettings,
    redis_settings: RedisSettings,
    sql: pymysql.cursors.Cursor,
    tables: Callable[..., str],
) -> Iterator[Callable[..., Env]]:
    """make_env(kind="rescan"|"oneoff", rows=N, **source overrides) -> a migrated source ready to use.

    Uses MariaDB's seq_1_to_N tables to fill rows; "rescan" rows are all due (checked an hour ago),
    "oneoff" rows were due a second ago. `name=` overrides the source name (default: the table's).
    """
    made: list[Env] = []

    def make(kind: str = "rescan", rows: int = 0, **overrides: object) -> Env:
        table = tables(kind, rows)
        fields: dict[str, object] = {"name": table.lower(), "table": table, **source_fields(kind)}
        fields.update(overrides)
        source = SourceSettings(**fields)  # type: ignore[arg-type]
        settings = Settings(
            mysql=mysql_settings,
            redis=redis_settings,
            sources=[source],
            jobs={"enabled": False},  # type: ignore[arg-type]
        )
        migrate.apply(settings)
        store = SourceStore(Database(mysql_settings), source)
        store.verify()
        env = Env(
            settings,
            source,
            store,
            ReadyQueue(connect_redis(redis_settings), Keys(redis_settings.key_prefix)),
            sql,
        )
        made.append(env)
        return env

    yield make
    for env in made:
        env.store.db.close()
        for db in env.extra_dbs:
            db.close()
        env.queue.client.close()


@pytest.fixture
def recorder() -> Iterator[apps.Recorder]:
    """The handlers' shared record of what ran, fresh for each test."""
    apps.RECORDER.reset()
    yield apps.RECORDER
    apps.RECORDER.reset()
