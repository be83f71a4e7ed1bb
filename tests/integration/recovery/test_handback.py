"""What a supervisor hands back when its worker process has exited (worker/handback.py): that worker's
started jobs are interrupted now and the rest of its pop is pending again, its hold and registry row
go; another worker's jobs, leases and hold are untouched. Real MariaDB and Redis; the "workers" are
names, their rows arranged in SQL as a started batch leaves them."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pymysql
import pytest

from duecast.admin import migrate
from duecast.shared.api.enqueue import Enqueuer, Job
from duecast.shared.process.runtime import build_queue, build_stores
from duecast.shared.settings import MySQLSettings, RedisSettings, Settings
from duecast.shared.states import State
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
        jobs={"table": table, "schedules_table": f"{table}_s"},  # type: ignore[arg-type]
        worker={"registry_table": f"{table}_w"},  # type: ignore[arg-type]
    )
    migrate.apply(s)
    yield s
    sql.execute(f"DROP TABLE IF EXISTS `{table}`, `{table}_s`, `{table}_w`")
    queue = build_queue(s)
    queue.client.delete(*queue.client.keys(f"{{{prefix}}}:*") or [f"{{{prefix}}}:none"])


def test_an_exited_workers_started_jobs_are_interrupted_and_its_pop_requeued_others_untouched(
    settings: Settings, sql: pymysql.cursors.Cursor
) -> None:
    table = f"`{settings.jobs.table}`"
    Enqueuer(settings, None).enqueue_many(Job("record", i) for i in range(10))
    (store,) = build_stores(settings, [settings.source(SOURCE)])
    queue = build_queue(settings)
    queue.push(SOURCE, store.claim_due(10))
    # Each worker pops 5 (its hold); the exited one had started 3 of them, the live one all 5.
    for worker in (EXITED, LIVE):
        assert queue.pop_held(worker, [SOURCE], 5, 0.1) is not None
    registry = WorkerRegistry(Database(settings.mysql), settings.worker)
    registry.register(EXITED, [SOURCE])
    registry.register(LIVE, [SOURCE])
    sql.execute(
        f"UPDATE {table} SET dc_state = {int(State.RUNNING)}, started_at = NOW(6), "
        "lease_until = NOW(6) + INTERVAL 15 SECOND, worker = %s WHERE id IN (1, 2, 3)",
        (EXITED,),
    )
    sql.execute(
        f"UPDATE {table} SET dc_state = {int(State.RUNNING)}, started_at = NOW(6), "
        "lease_until = NOW(6) + INTERVAL 15 SECOND, worker = %s WHERE id > 5",
        (LIVE,),
    )

    back = Handback(settings).after_exit(EXITED, WHY)

    assert (back.interrupted, back.held, back.complete) == (3, 2, True)
    sql.execute(f"SELECT id, dc_state, interruptions, last_error FROM {table} ORDER BY id")
    rows = {int(i): (int(s), int(n), e) for i, s, n, e in sql.fetchall()}
    assert {i: rows[i] for i in (1, 2, 3)} == {i: (int(State.IDLE), 1, WHY) for i in (1, 2, 3)}
    assert {i: rows[i] for i in (4, 5)} == {i: (int(State.IDLE), 0, None) for i in (4, 5)}
    assert {rows[i][:2] for i in range(6, 11)} == {(int(State.RUNNING), 0)}
    assert queue.held_by(EXITED) is None
    assert queue.held_by(LIVE) is not None
    assert {w.name for w in registry.alive()} == {LIVE}


def test_an_exited_worker_that_held_nothing_costs_nothing(settings: Settings) -> None:
    assert Handback(settings).after_exit(EXITED, WHY) == HandedBack()
