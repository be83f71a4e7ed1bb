"""Range mode's row read on real MariaDB: the packed read (one JSON value per batch) hands handlers
exactly what the plain row-by-row read does, and falls back to it when a server limit cuts it short."""

from __future__ import annotations

import datetime as dt
import logging
import uuid
from collections.abc import Callable, Iterator
from decimal import Decimal

import pymysql
import pytest

from duecast.shared.process.runtime import build_stores
from duecast.shared.queries.ranges import ranges_table
from duecast.shared.settings import MySQLSettings, RedisSettings, Settings, SourceSettings
from duecast.shared.storage.admin import migrate
from duecast.shared.storage.range_store import RangeStore

pytestmark = pytest.mark.integration

PACKABLE = ["ti", "si", "mi", "i", "bi", "bu", "c", "v"]
OTHERS = ["dt", "d", "f", "b"]
TEXTS = ["plain", "quote ' \" \\ back", "emoji 😀 and RTL שלום", "nul \x00 and\nnewline\ttab", "", "  pad  "]


@pytest.fixture
def typed(
    mysql_settings: MySQLSettings, redis_settings: RedisSettings, sql: pymysql.cursors.Cursor
) -> Iterator[Callable[[], tuple[RangeStore, str]]]:
    """A range-mode source over a table with a column of each kind, 250 rows in 3 spans, migrated."""
    tables: list[SourceSettings] = []

    def make() -> tuple[RangeStore, str]:
        table = f"typed_{uuid.uuid4().hex[:8]}"
        sql.execute(
            f"CREATE TABLE `{table}` (id BIGINT UNSIGNED PRIMARY KEY, ti TINYINT, si SMALLINT, "
            "mi MEDIUMINT, i INT, bi BIGINT, bu BIGINT UNSIGNED, c CHAR(8), v VARCHAR(64), "
            "dt DATETIME(6), d DECIMAL(12,3), f DOUBLE, b VARBINARY(16), updated_time DATETIME(6) NOT NULL)"
        )
        rows = []
        for n in range(1, 251):
            null = n % 7 == 0  # some rows hold NULL in every nullable column
            rows.append(
                (
                    n,
                    None if null else (-128 if n % 2 else 127),
                    None if null else -n,
                    None if null else n * 1000,
                    None if null else -(2**31) + n,
                    None if null else -(2**63) + n,
                    None if null else 2**64 - n,
                    None if null else f"c{n}",
                    None if null else TEXTS[n % len(TEXTS)],
                    None if null else dt.datetime(2026, 1, 1, 12, 0, n % 60, n),
                    None if null else Decimal(f"{n}.125"),
                    None if null else n / 3,
                    None if null else bytes([n % 256, 0, 255]),
                )
            )
        sql.executemany(
            f"INSERT INTO `{table}` VALUES (%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,'2020-01-01')", rows
        )
        src = SourceSettings(
            name=table,
            table=table,
            id_column="id",
            due_column="updated_time",
            period_s=10,
            mode="ranges",
            range_size=100,
        )
        tables.append(src)
        settings = Settings(
            mysql=mysql_settings,
            redis=redis_settings,
            sources=[src],
            jobs={"enabled": False},
        )
        migrate.apply(settings)
        (store,) = build_stores(settings, settings.sources)
        assert isinstance(store, RangeStore)
        store.discover(full=True)
        return store, table

    yield make
    for src in tables:
        sql.execute(f"DROP TABLE IF EXISTS `{src.table}`")
        sql.execute(f"DROP TABLE IF EXISTS `{ranges_table(src)}`")


def expected(sql: pymysql.cursors.Cursor, table: str, columns: list[str]) -> list[dict[str, object]]:
    sql.execute(f"SELECT id, {', '.join(columns)} FROM `{table}` ORDER BY id")
    names = [d[0] for d in sql.description or ()]
    return [dict(zip(names, r, strict=True)) for r in sql.fetchall()]


def read(store: RangeStore, columns: list[str]) -> list[dict[str, object]]:
    """What a worker's handler gets for every range, without duecast's own keys."""
    entries = store.claim_due(10)
    assert len(entries) == 3
    with store.started(entries, columns) as batch:
        rows = [{k: v for k, v in r.items() if not k.startswith("dc_")} for r in batch.rows]
        assert {r["dc_range"] for r in batch.rows} == {0, 100, 200}
    return rows


def test_packed_read_gives_handlers_exactly_what_the_plain_read_does(
    typed: Callable[[], tuple[RangeStore, str]], sql: pymysql.cursors.Cursor, caplog: pytest.LogCaptureFixture
) -> None:
    store, table = typed()
    assert store._packable(["id", *PACKABLE])  # so the packed path is the one checked here
    rows = read(store, PACKABLE)
    want = expected(sql, table, PACKABLE)
    assert rows == want
    for got, exp in zip(rows, want, strict=True):  # equal *and* the same types (1 == True == 1.0)
        assert {k: type(v) for k, v in got.items()} == {k: type(v) for k, v in exp.items()}
    assert "packed read" not in caplog.text


def test_columns_json_would_change_take_the_plain_read(
    typed: Callable[[], tuple[RangeStore, str]], sql: pymysql.cursors.Cursor
) -> None:
    store, table = typed()
    for column in OTHERS:
        assert not store._packable(["id", "i", column])
    assert not store._packable([])  # a handler reading every column
    rows = read(store, ["i", *OTHERS])
    want = expected(sql, table, ["i", *OTHERS])
    assert rows == want
    kinds = {type(r["dt"]) for r in rows} | {type(r["d"]) for r in rows} | {type(r["b"]) for r in rows}
    assert kinds == {dt.datetime, Decimal, bytes, type(None)}


def test_a_packed_value_cut_short_by_the_server_falls_back_to_the_plain_read(
    typed: Callable[[], tuple[RangeStore, str]], sql: pymysql.cursors.Cursor, caplog: pytest.LogCaptureFixture
) -> None:
    store, table = typed()
    with store.db.transaction() as cur:  # the store's own session: MariaDB truncates at 1 KiB
        cur.execute("SET SESSION group_concat_max_len = 1024")
    with caplog.at_level(logging.WARNING, logger="duecast.packed"):
        rows = read(store, PACKABLE)
    assert rows == expected(sql, table, PACKABLE)
    assert "packed read" in caplog.text
    assert "of 250 rows" in caplog.text
