"""Each job queue's store requeues only its own queue's runs of jobs (issue 16.5), so the sweep's log lines
and counters name the queue the jobs are in. Real MariaDB and Redis; time passes by back-dating in SQL."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator

import pymysql
import pytest

from duecast.dispatcher.redelivery import sweeper
from duecast.shared.api.enqueue import Enqueuer, Job
from duecast.shared.fanout.client import connect_redis
from duecast.shared.process.runtime import build_queue, build_stores
from duecast.shared.settings import MySQLSettings, RedisSettings, Settings
from duecast.shared.states import State
from duecast.shared.storage.admin import migrate
from duecast.shared.storage.leased.jobs import JobStore
from tests.integration import jobs_app

pytestmark = pytest.mark.integration
QUEUES = ["mail", "default"]  # mail's store is asked first, as in the report
DISPATCHED, RUNNING = int(State.DISPATCHED), int(State.RUNNING)


@pytest.fixture
def settings(
    mysql_settings: MySQLSettings, redis_settings: RedisSettings, sql: pymysql.cursors.Cursor
) -> Iterator[Settings]:
    table = f"jobs_{uuid.uuid4().hex[:8]}"
    s = Settings(
        mysql=mysql_settings,
        redis=redis_settings,
        jobs={"table": table, "schedules_table": f"{table}_s", "queues": QUEUES},  # type: ignore[arg-type]
    )
    migrate.apply(s)
    yield s
    sql.execute(f"DROP TABLE IF EXISTS `{table}`, `{table}_s`, `{table}_runs`, `{table}_cursors`")


def _stores(settings: Settings) -> dict[str, JobStore]:
    stores = build_stores(settings, [settings.source(f"jobs.{q}") for q in QUEUES])
    assert all(isinstance(s, JobStore) for s in stores)
    return {s.queue: s for s in stores if isinstance(s, JobStore)}


def _claimed(settings: Settings, stores: dict[str, JobStore], per_queue: dict[str, int]) -> None:
    """Enqueue `per_queue` jobs and claim them all (DISPATCHED), as a dispatcher would."""
    enqueuer = Enqueuer(settings, connect_redis(settings.redis), tasks=jobs_app.handlers.task_names)
    for queue, n in per_queue.items():
        enqueuer.enqueue_many(Job("record", {"n": i}, queue=queue) for i in range(n))
        assert len(stores[queue].claim_due(100)) == 1  # one run holds them all


def _by_queue(sql: pymysql.cursors.Cursor, settings: Settings, state: int) -> dict[str, int]:
    """Jobs per queue in runs of `state`."""
    sql.execute(
        f"SELECT queue, SUM(jobs) FROM `{settings.jobs.runs_table}` WHERE dc_state = %s GROUP BY queue",
        (state,),
    )
    return {str(q): int(n) for q, n in sql.fetchall()}


def test_a_queues_sweep_requeues_only_its_own_expired_dispatched_jobs(
    settings: Settings, sql: pymysql.cursors.Cursor
) -> None:
    stores = _stores(settings)
    _claimed(settings, stores, {"default": 3, "mail": 2})
    sql.execute(f"UPDATE `{settings.jobs.runs_table}` SET dc_dispatched_at = NOW(6) - INTERVAL 1 HOUR")

    assert stores["mail"].requeue_expired(60, 100) == 2
    assert _by_queue(sql, settings, DISPATCHED) == {"default": 3}
    assert stores["mail"].requeue_lost(100) == 0
    assert stores["default"].requeue_expired(60, 100) == 3
    assert _by_queue(sql, settings, DISPATCHED) == {}


def test_a_queues_sweep_takes_only_its_own_interrupted_runs(
    settings: Settings, sql: pymysql.cursors.Cursor
) -> None:
    stores = _stores(settings)
    _claimed(settings, stores, {"default": 3, "mail": 2})
    sql.execute(
        f"UPDATE `{settings.jobs.runs_table}` SET dc_state = {RUNNING}, "
        "started_at = NOW(6) - INTERVAL 1 HOUR, "
        "lease_until = NOW(6) - INTERVAL 1 MINUTE, worker = 'gone:1'"
    )

    assert stores["mail"].requeue_interrupted(100) == 2
    assert _by_queue(sql, settings, RUNNING) == {"default": 3}
    assert stores["default"].requeue_interrupted(100) == 3
    assert _by_queue(sql, settings, RUNNING) == {}


def test_the_sweep_logs_and_counts_each_queues_jobs_under_that_queue(
    settings: Settings, sql: pymysql.cursors.Cursor, caplog: pytest.LogCaptureFixture
) -> None:
    """The report: `requeued 5000 rows of jobs.mail not acked within 60s` when every job was in
    default (the first queue's store took them all)."""
    stores = _stores(settings)
    _claimed(settings, stores, {"default": 5})
    sql.execute(f"UPDATE `{settings.jobs.runs_table}` SET dc_dispatched_at = NOW(6) - INTERVAL 1 HOUR")
    queue = build_queue(settings)

    with caplog.at_level(logging.WARNING, logger="duecast.redelivery"):
        sweeper(settings, list(stores.values()), queue).drain()

    said = [r.getMessage() for r in caplog.records if getattr(r, "event", "") == "sweeper.requeued"]
    assert said == ["requeued 5 jobs of jobs.default not acked within 60s"]
    assert queue.stats("jobs.default").get("requeued") == 5
    assert "requeued" not in queue.stats("jobs.mail")


def test_the_sweep_says_jobs_whose_lease_ran_out_were_interrupted_not_unacked_for_60s(
    settings: Settings, sql: pymysql.cursors.Cursor, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 24.7: jobs (and a group's messages) whose 15 s lease ran out were reported as
    `not acked within 60s`, and the lease cause counted them as "runs"."""
    stores = _stores(settings)
    _claimed(settings, stores, {"default": 5})
    sql.execute(
        f"UPDATE `{settings.jobs.runs_table}` SET dc_state = {RUNNING}, "
        "started_at = NOW(6) - INTERVAL 20 SECOND, lease_until = NOW(6) - INTERVAL 5 SECOND, "
        "worker = 'gone:1'"
    )
    queue = build_queue(settings)

    with caplog.at_level(logging.WARNING, logger="duecast.redelivery"):
        sweeper(settings, list(stores.values()), queue).drain()

    said = [(getattr(r, "event", ""), r.getMessage()) for r in caplog.records]
    assert said == [("redelivery.interrupted", "requeued 5 jobs of jobs.default whose lease ran out")]
    assert queue.stats("jobs.default").get("requeued") == 5


def test_resetting_a_queue_resets_only_that_queue(settings: Settings, sql: pymysql.cursors.Cursor) -> None:
    stores = _stores(settings)
    _claimed(settings, stores, {"default": 3, "mail": 2})
    assert stores["mail"].reset_dispatched() == 2
    assert _by_queue(sql, settings, DISPATCHED) == {"default": 3}
