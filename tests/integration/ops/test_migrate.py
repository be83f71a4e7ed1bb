"""`duecast migrate` (admin.migrate.plan/apply) and start-up checks against real MariaDB tables."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pymysql
import pytest

from duecast.admin import migrate
from duecast.shared.process.runtime import build_stores
from duecast.shared.settings import (
    DispatcherSettings,
    MySQLSettings,
    RedisSettings,
    Settings,
    SourceSettings,
    WorkerSettings,
)
from duecast.shared.storage.db import Database
from duecast.shared.storage.leased.jobs import JobStore
from duecast.shared.storage.schema import SchemaError, leases_table_ddl, workers_table_ddl
from duecast.shared.storage.source_store import SourceStore
from tests.integration.conftest import source_fields

pytestmark = pytest.mark.integration

DISPATCH_COLUMNS = {
    # name: (COLUMN_TYPE, IS_NULLABLE, COLUMN_DEFAULT)
    "dc_state": ("tinyint(3) unsigned", "NO", "0"),
    "dc_attempt": ("int(10) unsigned", "NO", "0"),
    "dc_dispatched_at": ("datetime(6)", "YES", "NULL"),
}


@pytest.fixture
def settings_for(
    mysql_settings: MySQLSettings, redis_settings: RedisSettings, sql: pymysql.cursors.Cursor
) -> Callable[..., Settings]:
    """settings_for(table, kind, **source overrides, jobs=...) -> Settings with that one source.

    The dispatcher's leases table already exists (so plans show only what a test is about)."""
    sql.execute(leases_table_ddl(DispatcherSettings().leases_table))
    sql.execute(workers_table_ddl(WorkerSettings().registry_table))

    def make(table: str, kind: str = "rescan", jobs: Any = None, **overrides: object) -> Settings:
        fields = {"name": table.lower(), "table": table, **source_fields(kind), **overrides}
        return Settings(
            mysql=mysql_settings,
            redis=redis_settings,
            sources=[SourceSettings(**fields)],  # type: ignore[arg-type]
            jobs=jobs or {"enabled": False},
        )

    return make


@pytest.fixture
def jobs_table(sql: pymysql.cursors.Cursor) -> Iterator[str]:
    name = f"jobs_{uuid.uuid4().hex[:8]}"
    yield name
    sql.execute(f"DROP TABLE IF EXISTS `{name}`, `{name}_schedules`")


def columns(sql: pymysql.cursors.Cursor, table: str) -> dict[str, tuple[str, str, str | None]]:
    sql.execute(
        "SELECT COLUMN_NAME, COLUMN_TYPE, IS_NULLABLE, COLUMN_DEFAULT FROM information_schema.COLUMNS "
        "WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = %s ORDER BY ORDINAL_POSITION",
        (table,),
    )
    return {name: (kind, nullable, default) for name, kind, nullable, default in sql.fetchall()}


def index_columns(sql: pymysql.cursors.Cursor, table: str, index: str = "dc_due") -> list[str]:
    sql.execute(
        "SELECT COLUMN_NAME FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = DATABASE() "
        "AND TABLE_NAME = %s AND INDEX_NAME = %s ORDER BY SEQ_IN_INDEX",
        (table, index),
    )
    return [r[0] for r in sql.fetchall()]


def business_checksum(sql: pymysql.cursors.Cursor, table: str) -> tuple[int, int]:
    """Row count and an order-independent checksum over the business columns only."""
    sql.execute(
        f"SELECT COUNT(*), COALESCE(SUM(CRC32(CONCAT_WS('|', user_id, status, updated_time))), 0) "
        f"FROM `{table}`"
    )
    count, crc = sql.fetchone()  # type: ignore[misc]
    return int(count), int(crc)


def test_migrate_adds_dispatch_columns_and_index_then_is_idempotent(
    tables: Callable[..., str], settings_for: Callable[..., Settings], sql: pymysql.cursors.Cursor
) -> None:
    table = tables("rescan", rows=2000)
    settings = settings_for(table)
    sql.execute(
        f"UPDATE `{table}` SET status = 2, updated_time = updated_time - INTERVAL user_id SECOND "
        "WHERE user_id % 7 = 0"
    )
    business_before = columns(sql, table)
    checksum_before = business_checksum(sql, table)

    steps = migrate.plan(settings)

    assert len(steps) == 2, steps
    assert all(s.startswith(f"ALTER TABLE `{table}`") for s in steps)
    assert "ADD INDEX `dc_due` (`dc_state`, `updated_time`)" in steps[1]
    assert columns(sql, table) == business_before, "plan must not change anything"

    assert migrate.apply(settings) == steps

    after = columns(sql, table)
    assert {k: after[k] for k in DISPATCH_COLUMNS} == DISPATCH_COLUMNS
    assert {k: v for k, v in after.items() if k not in DISPATCH_COLUMNS} == business_before
    assert index_columns(sql, table) == ["dc_state", "updated_time"]
    assert business_checksum(sql, table) == checksum_before
    sql.execute(
        f"SELECT COUNT(*) FROM `{table}` WHERE dc_state = 0 AND dc_attempt = 0 AND dc_dispatched_at IS NULL"
    )
    assert sql.fetchone() == (2000,)

    assert migrate.plan(settings) == []
    assert migrate.apply(settings) == []
    assert business_checksum(sql, table) == checksum_before
    SourceStore(Database(settings.mysql), settings.sources[0]).verify()


def test_migrate_adds_only_the_missing_index(
    tables: Callable[..., str], settings_for: Callable[..., Settings], sql: pymysql.cursors.Cursor
) -> None:
    table = tables("oneoff", rows=10)
    sql.execute(
        f"ALTER TABLE `{table}` ADD COLUMN dc_state TINYINT UNSIGNED NOT NULL DEFAULT 0, "
        "ADD COLUMN dc_attempt INT UNSIGNED NOT NULL DEFAULT 0, ADD COLUMN dc_dispatched_at DATETIME(6) NULL"
    )
    settings = settings_for(table, "oneoff")

    assert migrate.plan(settings) == [f"ALTER TABLE `{table}` ADD INDEX `dc_due` (`dc_state`, `due_at`)"]
    migrate.apply(settings)

    assert index_columns(sql, table) == ["dc_state", "due_at"]
    assert migrate.plan(settings) == []


def test_a_timestamp_due_column_is_accepted(
    tables: Callable[..., str], settings_for: Callable[..., Settings], sql: pymysql.cursors.Cursor
) -> None:
    table = tables("oneoff", rows=3)
    sql.execute(f"ALTER TABLE `{table}` MODIFY due_at TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)")
    settings = settings_for(table, "oneoff")

    migrate.apply(settings)

    assert migrate.plan(settings) == []
    SourceStore(Database(settings.mysql), settings.sources[0]).verify()


def test_plan_on_a_missing_table_names_it(settings_for: Callable[..., Settings]) -> None:
    settings = settings_for("no_such_table_here")

    with pytest.raises(SchemaError, match="table no_such_table_here does not exist in this database"):
        migrate.plan(settings)
    with pytest.raises(SchemaError, match="does not exist"):
        migrate.apply(settings)


WRONG_COLUMNS = {
    "due-varchar": (
        "MODIFY updated_time VARCHAR(32) NOT NULL",
        {},
        r"updated_time is varchar; it must be a DATETIME",
    ),
    "due-date": ("MODIFY updated_time DATE NOT NULL", {}, r"updated_time is date; it must be a DATETIME"),
    "id-varchar": (
        "MODIFY user_id VARCHAR(20) NOT NULL",
        {},
        r"user_id is varchar; it must be an integer key",
    ),
    "no-due-column": (None, {"due_column": "checked_at"}, r"has no column checked_at"),
    "no-id-column": (None, {"id_column": "uid"}, r"has no column uid"),
}


@pytest.mark.parametrize("case", WRONG_COLUMNS.values(), ids=WRONG_COLUMNS.keys())
def test_plan_refuses_wrong_business_columns_and_changes_nothing(
    tables: Callable[..., str],
    settings_for: Callable[..., Settings],
    sql: pymysql.cursors.Cursor,
    case: tuple[str | None, dict[str, str], str],
) -> None:
    alter, overrides, message = case
    table = tables("rescan", rows=5)
    if alter:
        sql.execute(f"ALTER TABLE `{table}` {alter}")
    settings = settings_for(table, **overrides)
    before = columns(sql, table)

    with pytest.raises(SchemaError, match=message) as caught:
        migrate.apply(settings)

    assert f"source {table.lower()}" in str(caught.value)
    assert columns(sql, table) == before
    assert index_columns(sql, table) == []


def test_plan_refuses_an_id_column_that_is_not_the_primary_key(
    tables: Callable[..., str], settings_for: Callable[..., Settings], sql: pymysql.cursors.Cursor
) -> None:
    table = tables("rescan", rows=3)
    sql.execute(f"ALTER TABLE `{table}` DROP PRIMARY KEY, ADD COLUMN pk BIGINT AUTO_INCREMENT PRIMARY KEY")
    settings = settings_for(table)

    with pytest.raises(SchemaError, match="primary key"):
        migrate.plan(settings)


def test_verify_before_migrate_says_to_run_duecast_migrate(
    tables: Callable[..., str], settings_for: Callable[..., Settings]
) -> None:
    table = tables("rescan", rows=1)
    settings = settings_for(table)
    store = SourceStore(Database(settings.mysql), settings.sources[0])
    try:
        with pytest.raises(SchemaError, match=r"run `duecast migrate`") as caught:
            store.verify()
        assert table in str(caught.value)
    finally:
        store.db.close()


def test_verify_refuses_a_dc_due_index_on_the_wrong_columns(
    tables: Callable[..., str], settings_for: Callable[..., Settings], sql: pymysql.cursors.Cursor
) -> None:
    table = tables("rescan", rows=1)
    settings = settings_for(table)
    sql.execute(
        f"ALTER TABLE `{table}` ADD COLUMN dc_state TINYINT UNSIGNED NOT NULL DEFAULT 0, "
        "ADD COLUMN dc_attempt INT UNSIGNED NOT NULL DEFAULT 0, "
        "ADD COLUMN dc_dispatched_at DATETIME(6) NULL, ADD INDEX dc_due (dc_state)"
    )
    store = SourceStore(Database(settings.mysql), settings.sources[0])
    try:
        with pytest.raises(SchemaError, match=r"is on \(dc_state\), expected \(dc_state, updated_time\)"):
            store.verify()
    finally:
        store.db.close()


def test_the_jobs_table_is_created_when_jobs_are_enabled(
    tables: Callable[..., str],
    settings_for: Callable[..., Settings],
    sql: pymysql.cursors.Cursor,
    jobs_table: str,
) -> None:
    table = tables("rescan", rows=1)
    jobs = {"enabled": True, "table": jobs_table, "schedules_table": f"{jobs_table}_schedules"}
    settings = settings_for(table, jobs=jobs)

    steps = migrate.plan(settings)

    assert steps[0].startswith(f"CREATE TABLE IF NOT EXISTS `{jobs_table}`")
    assert steps[1].startswith(f"CREATE TABLE IF NOT EXISTS `{jobs_table}_schedules`")
    assert len(steps) == 4  # jobs and schedules tables, then the source's columns and index
    migrate.apply(settings)
    cols = columns(sql, jobs_table)
    assert {"id", "queue", "task", "payload", "run_at", "priority", "unique_slot", "last_error"} <= set(cols)
    assert {k: cols[k] for k in DISPATCH_COLUMNS} == DISPATCH_COLUMNS
    assert index_columns(sql, jobs_table) == ["dc_state", "queue", "priority", "run_at"]
    assert index_columns(sql, jobs_table, "dc_unique") == ["task", "unique_slot"]
    assert migrate.plan(settings) == []
    for store in build_stores(settings, settings.all_sources()):  # each verifies its table
        assert store.src.table in (table, jobs_table)


def test_an_older_jobs_table_is_upgraded_in_place_keeping_its_jobs(
    settings_for: Callable[..., Settings],
    tables: Callable[..., str],
    sql: pymysql.cursors.Cursor,
    jobs_table: str,
) -> None:
    # The jobs table of duecast 0.1's first cut: no priority, retries, uniqueness or leases.
    sql.execute(
        f"CREATE TABLE `{jobs_table}` (`id` BIGINT NOT NULL AUTO_INCREMENT, "
        "`queue` VARCHAR(64) NOT NULL DEFAULT 'default', `task` VARCHAR(191) NOT NULL, "
        "`payload` LONGTEXT NOT NULL, `run_at` DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6), "
        "`created_at` DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6), "
        "`dc_state` TINYINT UNSIGNED NOT NULL DEFAULT 0, `dc_attempt` INT UNSIGNED NOT NULL DEFAULT 0, "
        "`dc_dispatched_at` DATETIME(6) NULL, PRIMARY KEY (`id`), KEY `dc_due` (`dc_state`, `run_at`))"
    )
    sql.execute(f"INSERT INTO `{jobs_table}` (task, payload) VALUES ('old', '1')")
    settings = settings_for(
        tables("rescan", rows=1),
        jobs={"enabled": True, "table": jobs_table, "schedules_table": f"{jobs_table}_schedules"},
    )
    store = JobStore(
        Database(settings.mysql), settings.jobs.queue_sources()[0], settings.jobs, settings.mysql
    )
    with pytest.raises(SchemaError, match="older than this duecast; run `duecast migrate`"):
        store.verify()

    migrate.apply(settings)

    store.verify()
    assert index_columns(sql, jobs_table) == ["dc_state", "queue", "priority", "run_at"]
    sql.execute(f"SELECT task, priority, errors, max_attempts FROM `{jobs_table}`")
    assert sql.fetchall() == (("old", 0, 0, 20),)
    assert [e.id for e in store.claim_due(10)] == [1]


def test_global_unique_keys_of_an_older_table_become_per_task_keeping_every_job(
    settings_for: Callable[..., Settings],
    tables: Callable[..., str],
    sql: pymysql.cursors.Cursor,
    jobs_table: str,
) -> None:
    settings = settings_for(
        tables("rescan", rows=1),
        jobs={"enabled": True, "table": jobs_table, "schedules_table": f"{jobs_table}_schedules"},
    )
    migrate.apply(settings)
    # duecast <= 0.1 held a unique key across every task: its index was on unique_slot alone.
    sql.execute(f"ALTER TABLE `{jobs_table}` DROP INDEX dc_unique, ADD UNIQUE KEY dc_unique (unique_slot)")
    sql.execute(
        f"INSERT INTO `{jobs_table}` (task, payload, unique_key, unique_slot) "
        "VALUES ('rec', '1', 'report:42', 'report:42'), ('other', '2', 'k', 'k')"
    )
    assert migrate.plan(settings) == [
        f"ALTER TABLE `{jobs_table}` DROP INDEX `dc_unique`, "
        "ADD UNIQUE KEY `dc_unique` (`task`, `unique_slot`)"
    ]
    migrate.apply(settings)
    assert migrate.plan(settings) == []  # idempotent: a second run has nothing to do
    assert index_columns(sql, jobs_table, "dc_unique") == ["task", "unique_slot"]
    sql.execute(f"SELECT task, unique_slot FROM `{jobs_table}` ORDER BY id")
    assert sql.fetchall() == (("rec", "report:42"), ("other", "k"))
    sql.execute(
        f"INSERT INTO `{jobs_table}` (task, payload, unique_key, unique_slot) "
        "VALUES ('fail', '3', 'report:42', 'report:42')"
    )  # another task may hold the same key now
    with pytest.raises(pymysql.err.IntegrityError):
        sql.execute(
            f"INSERT INTO `{jobs_table}` (task, payload, unique_key, unique_slot) "
            "VALUES ('rec', '4', 'report:42', 'report:42')"
        )


def test_no_jobs_table_when_jobs_are_disabled(
    tables: Callable[..., str], settings_for: Callable[..., Settings], sql: pymysql.cursors.Cursor
) -> None:
    table = tables("rescan", rows=1)
    settings = settings_for(table)
    assert not settings.jobs.enabled

    def jobs_table_exists() -> bool:
        sql.execute(
            "SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() "
            "AND TABLE_NAME = %s",
            (settings.jobs.table,),
        )
        return sql.fetchone() == (1,)

    before = jobs_table_exists()
    steps = migrate.apply(settings)

    assert len(steps) == 2
    assert not any(settings.jobs.table in s for s in steps)
    assert jobs_table_exists() == before
