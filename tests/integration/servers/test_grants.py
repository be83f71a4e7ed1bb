"""sql/grants.sql on the real MariaDB: each account can do its role's work, and nothing more.

The file is run as shipped, with only the database, the account names and the example range
source's name substituted. Accounts and the database carry a random suffix, and are dropped after;
no other account is touched. The roles run through their production wiring (drain mode).
"""

from __future__ import annotations

import re
import secrets
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pymysql
import pytest
from pydantic import SecretStr

from duecast.dispatcher import main as dispatcher_main
from duecast.shared.api.enqueue import Enqueuer, Job
from duecast.shared.settings import MySQLSettings, RedisSettings, Settings, SourceSettings
from duecast.shared.storage.admin import migrate
from duecast.shared.storage.db import Database, connect
from duecast.shared.storage.source_store import SourceStore
from duecast.worker import main as worker_main
from tests.integration import apps, jobs_app, range_app

pytestmark = pytest.mark.integration

GRANTS = Path(__file__).resolve().parents[3] / "sql" / "grants.sql"
ROLES = ("migrate", "dispatcher", "worker", "enqueuer")
ACCESS_DENIED = {1142, 1143, 1044, 1045}  # table, column, database, login
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


@pytest.fixture(scope="module")
def granted(mysql_settings: MySQLSettings) -> Iterator[Granted]:
    suffix = uuid.uuid4().hex[:8]
    database = f"duecast_sec_{suffix}"
    names = {role: f"dcsec_{role}_{suffix}" for role in ROLES}
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

        text = GRANTS.read_text().replace("`app`.", f"`{database}`.")
        text = text.replace("dc_ranges_account_checks", f"dc_ranges_{range_app.SOURCE}")
        for role in ROLES:
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
        cur.execute(f"DROP DATABASE IF EXISTS `{database}`")
        root.close()


@pytest.fixture
def roles(granted: Granted, redis_settings: RedisSettings) -> Granted:
    """The module's accounts with this test's own Redis key prefix."""
    granted.redis = redis_settings
    return granted


def test_the_file_grants_each_account_only_what_it_lists(granted: Granted) -> None:
    granted.sql.execute("SHOW GRANTS FOR %s@'%%'", (granted.accounts["migrate"].user,))
    on_database = [
        set(m.group(1).split(", "))
        for (line,) in granted.sql.fetchall()
        if (m := re.match(rf"GRANT (.+) ON `{granted.database}`\.\* TO", line))
    ]
    assert on_database == [{"CREATE", "ALTER", "INDEX", "REFERENCES"}]
    for role in ("dispatcher", "worker"):
        granted.sql.execute("SHOW GRANTS FOR %s@'%%'", (granted.accounts[role].user,))
        for (line,) in granted.sql.fetchall():
            assert "ALL PRIVILEGES" not in line
            assert " ON *.*" not in line or line.startswith("GRANT USAGE"), line
            assert "`.*" not in line, line  # table-level only, never a whole database
            assert not re.search(r"\b(DROP|ALTER|CREATE|GRANT OPTION|SUPER|FILE|PROCESS)\b", line), line


def test_the_migrations_account_migrates_and_can_do_nothing_else(granted: Granted) -> None:
    assert migrate.plan(granted.settings("migrate")) == []  # the fixture's migrate ran as it
    granted.sql.execute(
        "SELECT COUNT(*) FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = %s "
        "AND TABLE_NAME = 'user_block_status' AND COLUMN_NAME LIKE 'dc\\_%%'",
        (granted.database,),
    )
    assert granted.sql.fetchone() == (3,)
    for stmt in (
        "SELECT * FROM user_block_status",
        "UPDATE user_block_status SET status = 2",
        "DELETE FROM duecast_jobs",
        "DROP TABLE user_block_status",
        "TRUNCATE TABLE account_checks",
    ):
        granted.refused("migrate", stmt)
    assert granted.refused("migrate", f"DROP DATABASE `{granted.database}`") == 1044


def test_the_dispatcher_account_claims_and_is_refused_everything_else(granted: Granted) -> None:
    settings = granted.settings("dispatcher", jobs={"enabled": False})
    store = SourceStore(Database(settings.mysql), settings.sources[0])
    try:
        store.verify()
        claimed = store.claim_due(5)
        assert len(claimed) == 5
        assert store.requeue_expired(3600, 100) == 0
        assert store.status().in_flight == 5
        store.reset_dispatched()
    finally:
        store.db.close()
    for stmt in (
        "DROP TABLE user_block_status",
        "DROP TABLE duecast_jobs",
        "ALTER TABLE user_block_status ADD COLUMN x INT",
        "DELETE FROM user_block_status",
        "INSERT INTO user_block_status (user_id, updated_time) VALUES (999, NOW())",
        "UPDATE account_checks SET status = 2",  # range mode: the business table is read-only
        "SELECT * FROM not_duecasts",
        "CREATE TABLE x (id INT)",
    ):
        granted.refused("dispatcher", stmt)


def test_the_worker_account_cannot_claim_insert_or_change_schema(granted: Granted) -> None:
    for stmt in (
        "DROP TABLE user_block_status",
        "ALTER TABLE duecast_jobs ADD COLUMN x INT",
        "INSERT INTO duecast_jobs (task, payload) VALUES ('x', 'null')",
        "INSERT INTO user_block_status (user_id, updated_time) VALUES (999, NOW())",
        f"INSERT INTO dc_ranges_{range_app.SOURCE} (range_id, lo, hi, checked_at) VALUES (99, 0, 1, NOW())",
        "SELECT * FROM not_duecasts",
        "SELECT * FROM duecast_schedules",
    ):
        granted.refused("worker", stmt)


def test_the_enqueuer_account_can_only_add_jobs(granted: Granted) -> None:
    granted.sql.execute("SHOW GRANTS FOR %s@'%%'", (granted.accounts["enqueuer"].user,))
    for (line,) in granted.sql.fetchall():
        assert not re.search(r"\b(UPDATE|DELETE|ALL PRIVILEGES)\b", line), line
    enqueuer = Enqueuer(granted.settings("enqueuer"), None)
    try:
        first = enqueuer.enqueue("record", {"n": 1}, unique_key="grants-once")
        again = enqueuer.enqueue("record", {"n": 2}, unique_key="grants-once", on_duplicate="keep")
        assert again == first
        merged, new = enqueuer.enqueue_many(
            [Job("record", 3, unique_key="grants-once"), Job("record", 4)], on_duplicate="keep"
        )
        assert (merged, merged.merged, new.merged) == (first, True, False)
    finally:
        enqueuer.db.close()
    granted.sql.execute("SELECT payload FROM duecast_jobs WHERE unique_key = 'grants-once' OR payload = '4'")
    assert sorted(p for (p,) in granted.sql.fetchall()) == ["4", '{"n":1}']
    assert granted.refused("enqueuer", "SELECT payload FROM duecast_jobs") == 1143
    for stmt in (
        # The probe's hijack (issue 17): rewrite a queued job's task, payload and time.
        f"UPDATE duecast_jobs SET task = 'fail', payload = '{{\"msg\":\"hijacked\"}}', run_at = NOW(6) "
        f"WHERE id = {first}",
        f"UPDATE duecast_jobs SET run_at = NOW(6) + INTERVAL 1 YEAR WHERE id = {first}",
        f"UPDATE duecast_jobs SET id = id + 1000000 WHERE id = {first}",
        f"UPDATE duecast_jobs SET unique_slot = NULL WHERE id = {first}",
        f"INSERT INTO duecast_jobs (id, task, payload) VALUES ({first}, 'x', 'null') "
        "ON DUPLICATE KEY UPDATE task = 'x'",
        f"REPLACE INTO duecast_jobs (id, task, payload) VALUES ({first}, 'x', 'null')",
        # A job born running, dispatched or dead, or posing as a schedule's run.
        "INSERT INTO duecast_jobs (task, payload, dc_state) VALUES ('x', 'null', 2)",
        "INSERT INTO duecast_jobs (task, payload, errors) VALUES ('x', 'null', 99)",
        "INSERT INTO duecast_jobs (task, payload, schedule, scheduled_for) VALUES ('x', 'null', 's', NOW())",
        "UPDATE duecast_jobs SET dc_state = 1",
        "UPDATE duecast_jobs SET errors = 0",
        "DELETE FROM duecast_jobs",
        "SELECT * FROM user_block_status",
        "SELECT * FROM duecast_schedules",
    ):
        granted.refused("enqueuer", stmt)
    granted.sql.execute(
        "SELECT task, payload, run_at > NOW(6) + INTERVAL 1 DAY FROM duecast_jobs WHERE id = %s", (first,)
    )
    assert granted.sql.fetchone() == ("record", '{"n":1}', 0)
    granted.sql.execute("DELETE FROM duecast_jobs WHERE unique_key = 'grants-once' OR payload = '4'")


def test_every_role_does_its_whole_job_under_its_grants(roles: Granted) -> None:
    """Dispatcher (rows, ranges and a job queue) and workers, each as its own account, drained."""
    apps.RECORDER.reset()
    range_app.PLAN.reset()
    roles.sql.execute("UPDATE user_block_status SET dc_state = 0, updated_time = NOW(6) - INTERVAL 1 HOUR")
    dispatcher = roles.settings("dispatcher", dispatcher={"poll_interval_s": 0.05})
    enqueuer = Enqueuer(dispatcher, None)  # the dispatcher's account may insert jobs (schedules)
    payload = {"grants": uuid.uuid4().hex}
    enqueuer.enqueue("record", payload)
    enqueuer.db.close()

    dispatcher_main.serve(dispatcher, threading.Event(), drain=True)
    for app, source in (
        ("tests.integration.apps:handlers", apps.RESCAN),
        ("tests.integration.range_app", range_app.SOURCE),
        ("tests.integration.jobs_app", "jobs"),
    ):
        worker = roles.settings("worker", worker={"app": app, "sources": [source], "block_timeout_s": 0.1})
        counts = worker_main.serve(worker, threading.Event(), drain=True).counts
        assert counts["failed"] == 0, (source, counts)

    assert sorted(apps.RECORDER.executions(apps.RESCAN)) == list(range(1, ROWS + 1))
    assert sorted(range_app.PLAN.runs) == list(range(1, ROWS + 1))
    assert jobs_app.runs_of(payload) == 1
    roles.sql.execute("SELECT COUNT(*) FROM user_block_status WHERE dc_state = 0 AND dc_attempt > 0")
    assert roles.sql.fetchone() == (ROWS,)
