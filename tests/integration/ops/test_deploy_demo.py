"""deploy/'s SQL against real MariaDB: the compose seed, `duecast migrate` with the compose services'
own settings, and the KEDA MySQL trigger's query (which needs migrate's dc_due index).

It runs in a database of its own (dropped afterwards), since the seed's table name is fixed.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pymysql
import pytest
import yaml

from duecast.shared.process.runtime import build_stores
from duecast.shared.settings import MySQLSettings, RedisSettings, Settings
from duecast.shared.storage.admin import migrate
from duecast.shared.storage.db import connect

pytestmark = pytest.mark.integration

DEPLOY = Path(__file__).resolve().parents[3] / "deploy"


def statements(path: Path) -> list[str]:
    """The file's statements: `--` comments dropped first (they may hold a `;`), then split on `;`."""
    text = re.sub(r"--[^\n]*", "", path.read_text())
    return [s.strip() for s in text.split(";") if s.strip()]


@pytest.fixture
def demo_db(mysql_settings: MySQLSettings) -> Iterator[tuple[MySQLSettings, pymysql.cursors.Cursor]]:
    settings = mysql_settings.model_copy(
        update={"database": f"{mysql_settings.database}_deploy_{uuid.uuid4().hex[:4]}"}
    )
    admin = connect(mysql_settings, database=False)
    admin.autocommit(True)
    with admin.cursor() as cur:
        cur.execute(f"CREATE DATABASE `{settings.database}` CHARACTER SET utf8mb4")
    conn = connect(settings)
    conn.autocommit(True)
    try:
        with conn.cursor() as cur:
            yield settings, cur
    finally:
        conn.close()
        with admin.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS `{settings.database}`")
        admin.close()


def compose_settings(
    mysql: MySQLSettings, redis: RedisSettings, monkeypatch: pytest.MonkeyPatch, service: str
) -> Settings:
    """A compose service's environment, with the servers and database swapped for the test's."""
    env: dict[str, Any] = yaml.safe_load((DEPLOY / "compose.yaml").read_text())["services"][service][
        "environment"
    ]
    for name in list(env):
        if name.startswith(("DUECAST_MYSQL__", "DUECAST_REDIS__")):
            del env[name]
    with monkeypatch.context() as m:
        for name, value in env.items():
            m.setenv(name, str(value))
        return Settings(mysql=mysql, redis=redis)


def keda_query() -> str:
    for doc in yaml.safe_load_all((DEPLOY / "k8s" / "worker-keda.yaml").read_text()):
        if doc and doc["kind"] == "ScaledObject":
            (trigger,) = [t for t in doc["spec"]["triggers"] if t["type"] == "mysql"]
            return str(trigger["metadata"]["query"])
    raise AssertionError("no ScaledObject in worker-keda.yaml")


def test_the_seed_migrate_and_the_keda_query_work_together(
    demo_db: tuple[MySQLSettings, pymysql.cursors.Cursor],
    redis_settings: RedisSettings,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    mysql, cur = demo_db
    for _ in range(2):  # MariaDB runs the seed once, but it is safe to run again
        for stmt in statements(DEPLOY / "demo" / "user_block_status.sql"):
            cur.execute(stmt)
    cur.execute("SELECT COUNT(*), MIN(updated_time) >= NOW(6) - INTERVAL 11 SECOND FROM user_block_status")
    assert cur.fetchone() == (10_000, 1)  # last checks spread over one period

    settings = compose_settings(mysql, redis_settings, monkeypatch, "migrate")
    assert migrate.apply(settings)
    assert migrate.plan(settings) == []  # up to date: what the dispatcher and workers verify
    for store in build_stores(settings, settings.sources):
        store.db.close()

    # 2,500 users last checked an hour ago (due), the rest just now (not due for 10 s).
    cur.execute(
        "UPDATE user_block_status SET updated_time = IF(user_id <= 2500, NOW(6) - INTERVAL 1 HOUR, NOW(6))"
    )
    cur.execute(keda_query())
    assert cur.fetchone() == (2500,)
    cur.execute("EXPLAIN " + keda_query())
    assert any("dc_due" in str(row) for row in cur.fetchall())
