"""`duecast migrate` for the jobs table: created when jobs are enabled, older tables upgraded in place."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator

import pymysql
import pytest

from duecast.shared.process.runtime import build_stores
from duecast.shared.settings import Settings
from duecast.shared.storage.admin import migrate
from duecast.shared.storage.db import Database
from duecast.shared.storage.leased.jobs import JobStore
from duecast.shared.storage.schema import SchemaError
from tests.integration.ops.migrate_helpers import DISPATCH_COLUMNS, columns, index_columns

pytestmark = pytest.mark.integration


@pytest.fixture
def jobs_table(sql: pymysql.cursors.Cursor) -> Iterator[str]:
    name = f"jobs_{uuid.uuid4().hex[:8]}"
    yield name
    sql.execute(f"DROP TABLE IF EXISTS `{name}`, `{name}_schedules`, `{name}_runs`, `{name}_cursors`")


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
    assert steps[2].startswith(f"CREATE TABLE IF NOT EXISTS `{jobs_table}_runs`")
    assert steps[3].startswith(f"CREATE TABLE IF NOT EXISTS `{jobs_table}_cursors`")
    assert len(steps) == 6  # jobs, schedules, runs and cursors tables, then the source's columns and index
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
    (run,) = store.claim_due(10)  # the old job, dispatched in a run of its own
    with store.started([run]) as batch:
        assert [r["id"] for r in batch.rows] == [1]


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
