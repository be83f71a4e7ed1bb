"""The demo's table against real MariaDB: filled with each user last checked at its slot, so the
demo starts at an even pace (users/period due in each second); `--start due` makes all due."""

from __future__ import annotations

from collections.abc import Iterator

import pymysql
import pytest

from duecast.shared.settings import MySQLSettings
from duecast.shared.storage.admin import demo_table

pytestmark = pytest.mark.integration


@pytest.fixture
def dropped(sql: pymysql.cursors.Cursor) -> Iterator[None]:
    yield
    sql.execute(f"DROP TABLE IF EXISTS {demo_table.TABLE}")


@pytest.mark.usefixtures("dropped")
def test_the_demo_starts_at_an_even_pace_or_all_due(
    mysql_settings: MySQLSettings, sql: pymysql.cursors.Cursor
) -> None:
    src = demo_table.source(period_s=4.0, mode="rows")
    sql.execute("SELECT NOW(6)")
    before = sql.fetchone()[0]
    assert demo_table.prepare(mysql_settings, 2_000, 4.0, lambda _n: None)
    due = demo_table.due_per_second(mysql_settings, src)
    assert sum(due) == 2_000
    assert all(abs(n - 500) <= 50 for n in due), due  # within 10% of users/period, each second
    # Each checked within the period before the fill: due one by one from then on, none at once.
    overdue = f"SELECT COUNT(*) FROM {demo_table.TABLE} WHERE updated_time <= %s - INTERVAL 4 SECOND"
    sql.execute(overdue, (before,))
    assert sql.fetchone()[0] == 0

    demo_table.make_all_due(mysql_settings, src)
    sql.execute(f"SELECT COUNT(*) FROM {demo_table.TABLE} WHERE updated_time <= NOW(6) - INTERVAL 4 SECOND")
    assert sql.fetchone()[0] == 2_000
