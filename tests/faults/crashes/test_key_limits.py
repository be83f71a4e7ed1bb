"""Concurrency keys (`[jobs.key_limits.<queue>]`) against real processes, MariaDB and Redis: each key's
max_running_per_key is never exceeded, counted by the handlers themselves, through a worker's
SIGKILL, and the dead worker's slots come back with its leases (every job is done). Handler calls
are timed in tests/faults/limits_app.py (the task `limited`: its job's id)."""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pymysql
import pytest

from duecast.shared.api.enqueue import Enqueuer, Job
from duecast.shared.settings import DispatcherSettings, MySQLSettings, RedisSettings, Settings, WorkerSettings
from duecast.shared.storage.admin import migrate
from tests.faults.conftest import _NOT_INHERITED
from tests.faults.limits_app import most_running, read_calls
from tests.faults.procs import Procs, wait_for
from tests.faults.runs import drop_job_tables

pytestmark = pytest.mark.faults

PER_KEY = 5
JOBS = {"acct-a": 60, "acct-b": 20, "acct-c": 20}
# The dead worker's slots come back when its leases run out: lease_s after the kill at most.
JOBS_SETTINGS = {"lease_s": 9, "key_limits": {"default": {"max_running_per_key": PER_KEY}}}
WORKER = ["-m", "duecast.worker", "--app", "tests.faults.limits_app"]


@pytest.fixture
def keyed(
    mysql_settings: MySQLSettings, redis_settings: RedisSettings, sql: pymysql.cursors.Cursor
) -> Iterator[Settings]:
    table = f"jobs_{uuid.uuid4().hex[:8]}"
    jobs = {"table": table, "schedules_table": f"{table}_s", **JOBS_SETTINGS}
    settings = Settings(mysql=mysql_settings, redis=redis_settings, jobs=jobs)  # type: ignore[arg-type]
    migrate.apply(settings)
    yield settings
    sql.execute(f"DELETE FROM `{DispatcherSettings().leases_table}`")
    sql.execute(f"DELETE FROM `{WorkerSettings().registry_table}`")
    drop_job_tables(sql, settings.jobs)


def _env(settings: Settings, log: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(_NOT_INHERITED)}
    env.update(
        {
            "DUECAST_MYSQL__DATABASE": settings.mysql.database,
            "DUECAST_REDIS__URL": settings.redis.url.get_secret_value(),
            "DUECAST_REDIS__KEY_PREFIX": settings.redis.key_prefix,
            "DUECAST_JOBS": json.dumps(
                JOBS_SETTINGS
                | {"table": settings.jobs.table, "schedules_table": settings.jobs.schedules_table}
            ),
            "DUECAST_DISPATCHER__POLL_INTERVAL_S": "0.05",
            "DUECAST_WORKER__BLOCK_TIMEOUT_S": "0.5",
            "DUECAST_WORKER__HEARTBEAT_S": "0.5",
            "DUECAST_TEST_ROW_DELAY_MS": "300",
            "DUECAST_TEST_EXEC_LOG": str(log),
            "PYTHONUNBUFFERED": "1",
        }
    )
    return env


def _left(sql: pymysql.cursors.Cursor, table: str) -> int:
    sql.execute(f"SELECT COUNT(*) FROM `{table}`")  # done jobs are deleted
    return int(sql.fetchone()[0])  # type: ignore[index]


def test_max_running_per_key_is_never_exceeded_through_a_worker_sigkill(
    keyed: Settings, procs: Procs, sql: pymysql.cursors.Cursor, tmp_path: Path
) -> None:
    log = tmp_path / "exec.log"
    enqueuer = Enqueuer(keyed, None)
    key_of: dict[int, str] = {}
    for key, n in JOBS.items():
        ids = enqueuer.enqueue_many(Job("limited", i, concurrency_key=key) for i in range(n))
        key_of.update({int(i): key for i in ids})
    env = _env(keyed, log)
    victim = procs.spawn("w1", WORKER, env)
    procs.spawn("w2", WORKER, env)
    procs.spawn("dispatcher", ["-m", "duecast.dispatcher"], env)
    wait_for(
        lambda: sum(1 for c in read_calls(log) if c.kind == "S" and c.pid == victim.pid) >= 5,
        30,
        "the victim to be running calls",
        procs.check,
    )
    procs.kill(victim)
    killed_at = time.time()
    wait_for(
        lambda: _left(sql, keyed.jobs.table) == 0, 60, "every job to be done after the kill", procs.check
    )

    calls = read_calls(log)
    assert len({c.id for c in calls if c.kind == "E"}) == sum(JOBS.values()), "a job was never run to its end"
    assert {c.id for c in calls if c.kind == "S" and c.pid == victim.pid} - {
        c.id for c in calls if c.kind == "E" and c.pid == victim.pid
    }, "the kill interrupted no call: the test proved nothing about slots coming back"
    most = {
        key: most_running([c for c in calls if key_of[c.id] == key], {victim.pid: killed_at}) for key in JOBS
    }
    everyone = most_running(calls, {victim.pid: killed_at})
    print(f"\nmax_running_per_key {PER_KEY}: at most {most} running at once per key, {everyone} in all")
    for key, n in most.items():
        assert n <= PER_KEY, f"{n} calls of key {key} running at once under max_running_per_key = {PER_KEY}"
    assert most["acct-a"] >= PER_KEY - 1, f"key A at most {most['acct-a']} at once: the limit never bound"
    assert everyone > PER_KEY, f"{everyone} running at once in all: the keys were not served side by side"
