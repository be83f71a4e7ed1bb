"""Fault-tier fixtures: a fresh source table and key prefix per test, and the real processes on it.

`fault_env(kind, **source)` makes a migrated one-off ("oneoff": id, due_at; success deletes) or
re-scan ("rescan": id, due_at, checked_by_attempt; success touches) table, configures the child
processes through DUECAST_* variables, and gives the test SQL and Redis helpers to arrange faults
and assert on their outcome. Time passes by back-dating dc_dispatched_at in SQL, never by sleeping.
Every process a test starts is SIGKILLed at teardown, and a failing test shows each one's log tail.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pymysql
import pytest
import redis

from duecast.shared.fanout.keys import Keys
from duecast.shared.settings import (
    DispatcherSettings,
    JobsSettings,
    MySQLSettings,
    RedisSettings,
    Settings,
    SourceSettings,
    WorkerSettings,
)
from duecast.shared.storage.admin import migrate
from tests.faults.env import (  # noqa: F401  (re-exported: tests import these from here)
    _NOT_INHERITED,
    APP,
    CRASH_AFTER_COMMIT,
    DISPATCHED,
    IDLE,
    KILL_AFTER_POP,
    KINDS,
    REDIS_DOWN,
    RESCAN_PERIOD_S,
    RUNNING,
    SESSION_LOST,
    SOURCE_NAMES,
    WAIT_S,
    Batch,
    FaultEnv,
    _child_env,
    _create_table,
)
from tests.faults.private_redis import PrivateRedis
from tests.faults.procs import Procs, tail


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """On failure, append each process's log tail (and the execution log's) to the report."""
    report = yield
    procs: Procs | None = getattr(item, "_fault_procs", None)
    if procs is not None and report.failed and report.when in ("setup", "call"):
        report.sections.append(("duecast processes (log tails)", procs.report()))
        exec_log = procs.log_dir / "exec.log"
        report.sections.append(("execution log (tail)", tail(exec_log)))
    return report


@pytest.fixture
def procs(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Procs]:
    """The processes of one test; all SIGKILLed and reaped at teardown, pass or fail."""
    started = Procs(tmp_path)
    request.node._fault_procs = started
    yield started
    started.kill_all()


@pytest.fixture
def private_redis(tmp_path: Path) -> Iterator[PrivateRedis]:
    """A running throwaway redis-server for this test only (FLUSHALL and kills stay off the shared one)."""
    server = PrivateRedis(tmp_path)
    try:
        server.start()
        yield server
    finally:
        server.kill()
        server.client.close()


@pytest.fixture
def fault_env(
    mysql_settings: MySQLSettings,
    redis_settings: RedisSettings,
    sql: pymysql.cursors.Cursor,
    procs: Procs,
    tmp_path: Path,
) -> Iterator[Callable[..., FaultEnv]]:
    """fault_env(kind="oneoff"|"rescan", **source overrides) -> a FaultEnv on a fresh migrated table."""
    tables: list[str] = []
    clients: list[redis.Redis] = []

    def make(kind: str = "oneoff", **overrides: Any) -> FaultEnv:
        table = f"fault_{kind}_{uuid.uuid4().hex[:8]}"
        _create_table(sql, table, kind)
        tables.append(table)
        fields: dict[str, Any] = {
            "name": SOURCE_NAMES[kind],
            "table": table,
            "id_column": "id",
            "due_column": "due_at",
            "period_s": RESCAN_PERIOD_S if kind == "rescan" else 0,
            "on_success": "touch" if kind == "rescan" else "delete",
            "claim_batch": 100,
            "visibility_timeout_s": 30,  # nothing expires by itself during a test: we back-date
        }
        fields.update(overrides)
        source = SourceSettings(**fields)
        migrate.apply(
            Settings(
                mysql=mysql_settings, redis=redis_settings, sources=[source], jobs=JobsSettings(enabled=False)
            )
        )
        client = redis.Redis.from_url(redis_settings.url.get_secret_value(), socket_timeout=5)
        clients.append(client)
        return FaultEnv(
            source=source,
            sql=sql,
            mysql=mysql_settings,
            keys=Keys(redis_settings.key_prefix),
            redis=client,
            tmp=tmp_path,
            procs=procs,
            env=_child_env(mysql_settings, redis_settings, source),
        )

    yield make
    procs.kill_all()  # before dropping what they use
    # The session's leader lease and worker registry outlive a test's processes: clear them, so
    # the next test's dispatcher leads at once instead of waiting out a dead leader's lease.
    sql.execute(f"DELETE FROM `{DispatcherSettings().leases_table}`")
    sql.execute(f"DELETE FROM `{WorkerSettings().registry_table}`")
    for client in clients:
        client.close()
    for table in tables:
        sql.execute(f"DROP TABLE IF EXISTS `{table}`")
