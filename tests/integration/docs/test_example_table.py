"""examples/blockcheck/table.sql makes exactly the users it says, at its 1,000 and scaled up.

A `WITH RECURSIVE ... i < N` counter stops silently at 1,001 rows on MariaDB (max_recursive_iterations),
so a first app scaled to 50,000 users checked 1,001 and nothing said so. The script is run as a user
would edit it: only its `SET @users = ...` line changed.
"""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pymysql
import pytest

pytestmark = pytest.mark.integration

SCRIPT = Path(__file__).resolve().parents[3] / "examples" / "blockcheck" / "table.sql"
USERS_LINE = re.compile(r"^SET @users = ([0-9]+);$", re.M)


def statements(users: int, table: str) -> list[str]:
    """The script's statements with `users` users, on a private table name."""
    text = SCRIPT.read_text()
    assert USERS_LINE.search(text), "table.sql no longer says how many users in one SET line"
    text = USERS_LINE.sub(f"SET @users = {users};", text).replace("user_block_status", table)
    code = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("--"))
    return [stmt for stmt in code.split(";\n") if stmt.strip()]


@pytest.fixture
def table(sql: pymysql.cursors.Cursor) -> Iterator[str]:
    name = f"ubs_{uuid.uuid4().hex[:8]}"
    yield name
    sql.execute(f"DROP TABLE IF EXISTS `{name}`")


def run(sql: pymysql.cursors.Cursor, users: int, table: str) -> tuple[int, int, int]:
    for stmt in statements(users, table):
        sql.execute(stmt)
    sql.execute(f"SELECT COUNT(*), MIN(user_id), MAX(user_id) FROM `{table}`")
    count, low, high = sql.fetchone()
    return int(count), int(low), int(high)


def test_the_script_says_1000_users_and_makes_them(sql: pymysql.cursors.Cursor, table: str) -> None:
    assert USERS_LINE.search(SCRIPT.read_text()).group(1) == "1000"  # type: ignore[union-attr]
    assert not any("RECURSIVE" in stmt.upper() for stmt in statements(1000, table))
    assert run(sql, 1000, table) == (1000, 1, 1000)


@pytest.mark.parametrize("users", [1001, 50_000])
def test_scaled_up_it_makes_exactly_the_users_it_says(
    sql: pymysql.cursors.Cursor, table: str, users: int
) -> None:
    assert run(sql, users, table) == (users, 1, users)


def test_a_million_users(sql: pymysql.cursors.Cursor, table: str) -> None:
    """The script's stated ceiling (about 15 s on a shared 2-core machine)."""
    started = time.monotonic()
    assert run(sql, 1_000_000, table) == (1_000_000, 1, 1_000_000)
    assert time.monotonic() - started < 120
