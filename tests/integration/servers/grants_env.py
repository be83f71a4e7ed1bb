"""sql/grants.sql applied to a throwaway database: every account of the file, named uniquely for the
run, created, granted as the file says (after `duecast migrate` as the migrations account), and
dropped after. No other account is touched. test_grants.py and test_grants_roles.py share it.
"""

from __future__ import annotations

import secrets
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pymysql
import pytest
from pydantic import SecretStr

from duecast.shared.settings import MySQLSettings, RedisSettings, Settings, SourceSettings
from duecast.shared.storage.admin import migrate
from duecast.shared.storage.db import connect
from tests.integration import apps, range_app
from tests.integration.topics.topics_env import groups

GRANTS = Path(__file__).resolve().parents[3] / "sql" / "grants.sql"
ROLES = ("migrate", "dispatcher", "worker", "enqueuer", "publisher", "dashboard")
HOLDER = "holder"  # the locked account that owns the enqueuer's one function (never logs in)
ACCESS_DENIED = {1142, 1143, 1044, 1045, 1370}  # table, column, database, login, routine
ROWS = 50


def statements(text: str) -> list[str]:
    body = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("--"))
    return [s.strip() for s in body.split(";\n") if s.strip()]


@dataclass
class Granted:
    database: str
    accounts: dict[str, MySQLSettings]
    sql: pymysql.cursors.Cursor  # root, autocommit, on the test database
    redis: RedisSettings

    def settings(self, role: str, **sections: Any) -> Settings:
        rescan = SourceSettings(
            name=apps.RESCAN,
            table="user_block_status",
            id_column="user_id",
            due_column="updated_time",
            period_s=10,
        )
        ranged = SourceSettings(
            name=range_app.SOURCE,
            table="account_checks",
            id_column="user_id",
            due_column="updated_time",
            period_s=10,
            mode="ranges",
            range_size=10,
        )
        sections.setdefault("topics", {"names": ["orders", "ledger"], "groups": groups()})
        return Settings(
            mysql=self.accounts[role],
            redis=self.redis,
            sources=[rescan, ranged],
            **sections,
        )

    def refused(self, role: str, stmt: str) -> int:
        """Run `stmt` as `role`; return the error code, failing the test if it was allowed."""
        conn = connect(self.accounts[role])
        try:
            with conn.cursor() as cur, pytest.raises(pymysql.err.MySQLError) as info:
                cur.execute(stmt)
        finally:
            conn.close()
        code = int(info.value.args[0])
        assert code in ACCESS_DENIED, info.value
        return code

    def grants_of(self, role: str) -> list[str]:
        self.sql.execute("SHOW GRANTS FOR %s@'%%'", (self.accounts[role].user,))
        return [str(line) for (line,) in self.sql.fetchall()]


@contextmanager
def granted_database(mysql_settings: MySQLSettings) -> Iterator[Granted]:
    suffix = uuid.uuid4().hex[:8]
    database = f"duecast_sec_{suffix}"
    names = {role: f"dcsec_{role}_{suffix}" for role in (*ROLES, HOLDER)}
    passwords = {role: secrets.token_hex(16) for role in ROLES}
    root = connect(mysql_settings, database=False)
    root.autocommit(True)
    cur = root.cursor()
    try:
        cur.execute(f"CREATE DATABASE `{database}` CHARACTER SET utf8mb4")
        cur.execute(f"USE `{database}`")
        for table in ("user_block_status", "account_checks"):
            cur.execute(
                f"CREATE TABLE `{table}` (user_id BIGINT PRIMARY KEY, status INT NOT NULL DEFAULT 1, "
                "updated_time DATETIME(6) NOT NULL)"
            )
            cur.execute(f"INSERT INTO `{table}` SELECT seq, 1, NOW(6) - INTERVAL 1 HOUR FROM seq_1_to_{ROWS}")
        cur.execute("CREATE TABLE not_duecasts (id INT PRIMARY KEY)")  # granted to nobody
        for role in ROLES:
            cur.execute("CREATE USER %s@'%%' IDENTIFIED BY %s", (names[role], passwords[role]))
        cur.execute("CREATE USER %s@'localhost' ACCOUNT LOCK", (names[HOLDER],))

        text = GRANTS.read_text().replace("`app`.", f"`{database}`.")
        text = text.replace("dc_ranges_account_checks", f"dc_ranges_{range_app.SOURCE}")
        for role in (*ROLES, HOLDER):
            text = text.replace(f"'duecast_{role}'@", f"'{names[role]}'@")
        grants = statements(text)
        assert not [g for g in grants if "'duecast_" in g or "`app`" in g]
        first = [g for g in grants if f"'{names['migrate']}'@" in g]

        accounts = {
            role: mysql_settings.model_copy(
                update={"user": names[role], "password": SecretStr(passwords[role]), "database": database}
            )
            for role in ROLES
        }
        state = Granted(database, accounts, cur, RedisSettings())
        for stmt in first:
            cur.execute(stmt)
        # As a DBA would: migrate as the migrations account, then the table-level grants.
        migrate.apply(state.settings("migrate"))
        for stmt in grants:
            if stmt not in first:
                cur.execute(stmt)
        yield state
    finally:
        for role in ROLES:
            cur.execute("DROP USER IF EXISTS %s@'%%'", (names[role],))
        cur.execute("DROP USER IF EXISTS %s@'localhost'", (names[HOLDER],))
        cur.execute(f"DROP DATABASE IF EXISTS `{database}`")
        root.close()
