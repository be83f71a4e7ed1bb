"""Fairness by concurrency key on real MariaDB + Redis (issue 27.8): in a queue with
`[jobs.key_limits.<queue>]`, one key's backlog of 10,000 queued jobs does not delay another key's
job by more than a few seconds: the keys are served in turn, each within max_running_per_key. (A
queue-wide max_running of 20 served in claim order would keep it behind the whole backlog: 10,000
jobs of 0.5 s at 20 at once, over four minutes.)"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator

import pymysql
import pytest

from duecast.dispatcher.main import serve as serve_dispatcher
from duecast.shared.api.enqueue import Enqueuer, Job
from duecast.shared.fanout.client import connect_redis
from duecast.shared.settings import MySQLSettings, RedisSettings, Settings
from duecast.shared.storage.admin import migrate
from duecast.worker import main as worker_main
from duecast.worker.main import serve as serve_worker
from tests.integration import fairness_app

pytestmark = pytest.mark.integration

BACKLOG = 10_000
PER_KEY = 20
# B's job runs 0.5 s (fairness_app.KEYED_S); the rest is its wait for a claim and a worker. Measured
# 0.53-0.55 s (3 runs, a machine shared with other work); the bound leaves room for a loaded one.
BOUND_S = 4.0


@pytest.fixture
def keyed(
    mysql_settings: MySQLSettings, redis_settings: RedisSettings, sql: pymysql.cursors.Cursor
) -> Iterator[Settings]:
    table = f"keyf_{uuid.uuid4().hex[:8]}"
    settings = Settings(
        mysql=mysql_settings,
        redis=redis_settings,
        jobs={  # type: ignore[arg-type]
            "table": table,
            "schedules_table": f"{table}_s",
            # Leases far longer than the test: the worker is in this process (test_fairness.py).
            "lease_s": 45.0,
            "key_limits": {"default": {"max_running_per_key": PER_KEY}},
        },
        worker={"app": "tests.integration.fairness_app", "sources": ["jobs"]},  # type: ignore[arg-type]
        dispatcher={"poll_interval_s": 0.05},  # type: ignore[arg-type]
    )
    migrate.apply(settings)
    yield settings
    sql.execute(f"DROP TABLE IF EXISTS `{table}`, `{table}_s`, `{table}_runs`, `{table}_cursors`")


def _pending(sql: pymysql.cursors.Cursor, table: str, key: str) -> int:
    sql.execute(f"SELECT COUNT(*) FROM `{table}` WHERE concurrency_key = %s", (key,))
    return int(sql.fetchone()[0])  # type: ignore[index]


# A bound on real seconds, with the worker in this process: in the serial phase (test_fairness.py).
@pytest.mark.serial
def test_one_keys_backlog_does_not_delay_another_keys_job(
    keyed: Settings, sql: pymysql.cursors.Cursor, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(worker_main, "FINISH_GRACE_S", 1.0)  # stopping: the backlog never ends
    table = keyed.jobs.table
    enqueuer = Enqueuer(keyed, connect_redis(keyed.redis), fairness_app.handlers.task_names)
    enqueuer.enqueue_many(Job("keyed_async", i, concurrency_key="acct-a") for i in range(BACKLOG))
    stop = threading.Event()
    roles = [threading.Thread(target=f, args=(keyed, stop)) for f in (serve_dispatcher, serve_worker)]
    for role in roles:
        role.start()
    try:
        # Key A's jobs are running (at its limit) before key B's one is enqueued.
        deadline = time.monotonic() + 20
        while _pending(sql, table, "acct-a") > BACKLOG - PER_KEY and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _pending(sql, table, "acct-a") <= BACKLOG - PER_KEY, "key A's jobs never ran"
        began = time.monotonic()
        enqueuer.enqueue("keyed_async", "b", concurrency_key="acct-b")
        while _pending(sql, table, "acct-b") and time.monotonic() < began + 30:
            time.sleep(0.02)
        took = time.monotonic() - began
        left_a = _pending(sql, table, "acct-a")
    finally:
        stop.set()
        for role in roles:
            role.join(timeout=60)
    print(f"\nkey B's job done {took:.2f}s after its enqueue, {left_a:,} of key A's still queued")
    assert took <= BOUND_S, f"key B's job took {took:.1f}s behind key A's backlog"
    assert left_a >= BACKLOG - 1000, "key A's backlog was mostly still there: B did not wait it out"
