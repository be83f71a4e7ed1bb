"""What a supervisor hands back when its worker process has exited (worker/handback.py): that worker's
started jobs are interrupted now and the rest of its pop is pending again, its hold and registry row
go; another worker's jobs, leases and hold are untouched. Real MariaDB and Redis; the "workers" are
names, their rows arranged in SQL as a started batch leaves them."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pymysql
import pytest

from duecast.shared.api.enqueue import Enqueuer, Job
from duecast.shared.process.runtime import build_queue, build_stores
from duecast.shared.settings import MySQLSettings, RedisSettings, Settings
from duecast.shared.states import State
from duecast.shared.storage.admin import migrate
from duecast.shared.storage.db import Database
from duecast.shared.storage.worker_registry import WorkerRegistry
from duecast.worker.handback import Handback, HandedBack

pytestmark = pytest.mark.integration
SOURCE = "jobs.default"
EXITED, LIVE = "host-a:101", "host-a:102"
WHY = "interrupted: its worker process was killed by SIGKILL before finishing it"


@pytest.fixture
def settings(
    mysql_settings: MySQLSettings, redis_settings: RedisSettings, sql: pymysql.cursors.Cursor
) -> Iterator[Settings]:
    table = f"jobs_{uuid.uuid4().hex[:8]}"
    prefix = f"{redis_settings.key_prefix}-{uuid.uuid4().hex[:6]}"
    s = Settings(
        mysql=mysql_settings,
        redis=redis_settings.model_copy(update={"key_prefix": prefix}),
        jobs={"table": table, "schedules_table": f"{table}_s", "run_size": 1},  # type: ignore[arg-type]
        worker={"registry_table": f"{table}_w"},  # type: ignore[arg-type]
    )
    migrate.apply(s)
    yield s
    sql.execute(
        f"DROP TABLE IF EXISTS `{table}`, `{table}_s`, `{table}_w`, `{table}_runs`, `{table}_cursors`"
    )
    queue = build_queue(s)
    queue.client.delete(*queue.client.keys(f"{{{prefix}}}:*") or [f"{{{prefix}}}:none"])


def test_an_exited_workers_started_jobs_are_interrupted_and_its_pop_requeued_others_untouched(
    settings: Settings, sql: pymysql.cursors.Cursor
) -> None:
    table = f"`{settings.jobs.table}`"
    Enqueuer(settings, None).enqueue_many(Job("record", i) for i in range(10))  # ids 1-10
    (store,) = build_stores(settings, [settings.source(SOURCE)])
    queue = build_queue(settings)
    queue.push(SOURCE, store.claim_due(10))
    # Each worker pops 5 (its hold); the exited one had started 3 of them, the live one all 5.
    for worker in (EXITED, LIVE):
        assert queue.pop_held(worker, [SOURCE], 5, 0.1) is not None
    registry = WorkerRegistry(Database(settings.mysql), settings.worker)
    registry.register(EXITED, [SOURCE])
    registry.register(LIVE, [SOURCE])
    # Runs of one job each (run_size 1): the runs of jobs 1-3 started by the exited worker, 6-10 by
    # the live one. A run's members are its jobs' ids.
    runs = f"`{settings.jobs.runs_table}`"
    for worker, where in ((EXITED, "members IN ('1', '2', '3')"), (LIVE, "CAST(members AS UNSIGNED) > 5")):
        sql.execute(
            f"UPDATE {runs} SET dc_state = {int(State.RUNNING)}, started_at = NOW(6), "
            f"lease_until = NOW(6) + INTERVAL 15 SECOND, worker = %s WHERE {where}",
            (worker,),
        )

    back = Handback(settings).after_exit(EXITED, WHY)

    assert (back.interrupted, back.held, back.complete) == (3, 2, True)
    sql.execute(f"SELECT id, dc_state, interruptions, last_error FROM {table} ORDER BY id")
    rows = {int(i): (int(s), int(n), e) for i, s, n, e in sql.fetchall()}
    assert {i: rows[i] for i in (1, 2, 3)} == {i: (int(State.IDLE), 1, WHY) for i in (1, 2, 3)}
    assert {i: rows[i] for i in (4, 5)} == {i: (int(State.IDLE), 0, None) for i in (4, 5)}
    sql.execute(f"SELECT CAST(members AS UNSIGNED), dc_state, worker FROM {runs} ORDER BY 1")
    # 1-3's runs are gone (interrupted), 4-5's pending again (never started), the live one's running.
    assert sql.fetchall() == (
        (4, int(State.IDLE), None),
        (5, int(State.IDLE), None),
        *((i, int(State.RUNNING), LIVE) for i in range(6, 11)),
    )
    assert queue.held_by(EXITED) is None
    assert queue.held_by(LIVE) is not None
    assert {w.name for w in registry.alive()} == {LIVE}


def test_an_exited_worker_that_held_nothing_costs_nothing(settings: Settings) -> None:
    assert Handback(settings).after_exit(EXITED, WHY) == HandedBack()
