"""`duecast migrate` (admin.migrate.plan/apply) and start-up checks against real MariaDB tables."""

from __future__ import annotations

from collections.abc import Callable

import pymysql
import pytest

from duecast.shared.settings import Settings
from duecast.shared.storage.admin import migrate
from duecast.shared.storage.db import Database
from duecast.shared.storage.schema import SchemaError
from duecast.shared.storage.source_store import SourceStore
from tests.integration.ops.migrate_helpers import DISPATCH_COLUMNS, business_checksum, columns, index_columns

pytestmark = pytest.mark.integration


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
