"""A worker's start and finish lock only the rows they name: another session holding a row of the
same small table (another worker's open start or finish, a stopped worker, an application's
transaction) never makes them wait.

Found by a chaos run (2026-11-28): the runs table holds only the runs in flight, a handful of rows,
and there the optimizer read the runs' fenced statements by a full scan of a secondary index (a
DELETE by ids, by the whole table), waiting on every row another session held. A worker's finish
then waited for a rival's lock on a run it did not name until its lock wait ran out, three times a
try, for a minute. Each statement is now read by PRIMARY (an index hint; a DELETE, which takes none,
by `ORDER BY` its key and `LIMIT` the number of ids).
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any, cast

import pymysql
import pytest

from duecast.dispatcher.main import serve as serve_dispatcher
from duecast.shared.acks import Ack, Row
from duecast.shared.api.enqueue import Enqueuer
from duecast.shared.api.handlers import Handler, Registry
from duecast.shared.fanout.client import connect_redis
from duecast.shared.fanout.keys import Keys
from duecast.shared.fanout.queue import ReadyQueue
from duecast.shared.queries.ranges import ranges_table
from duecast.shared.settings import MySQLSettings, RedisSettings, Settings, WorkerSettings
from duecast.shared.states import State
from duecast.shared.storage.admin import migrate
from duecast.shared.storage.admin.job_admin import Filter, JobAdmin
from duecast.shared.storage.db import Database
from duecast.shared.storage.leased.jobs import JobStore
from duecast.shared.storage.leased.members import decode_members
from duecast.shared.storage.source_store import Store
from duecast.worker.main import serve as serve_worker
from duecast.worker.worker import Worker
from tests.integration import range_app
from tests.integration.conftest import Env

pytestmark = pytest.mark.integration

JOBS = 12
RUN_SIZE = 2  # six runs: the worker gets five, the holder keeps the sixth locked

handlers = Registry()
RAN: Counter[int] = Counter()


@handlers.task("counted")
def counted(payload: Any) -> None:
    RAN[int(payload)] += 1


@pytest.fixture
def jobs_settings(
    mysql_settings: MySQLSettings, redis_settings: RedisSettings, sql: pymysql.cursors.Cursor
) -> Iterator[Callable[[int], Settings]]:
    made: list[str] = []

    def make(retention_s: int) -> Settings:
        table = f"jobs_{uuid.uuid4().hex[:8]}"
        made.append(table)
        settings = Settings(
            mysql=mysql_settings.model_copy(update={"lock_wait_s": 1}),
            redis=redis_settings,
            jobs={  # type: ignore[arg-type]
                "table": table,
                "schedules_table": f"{table}_s",
                "lease_s": 60,
                "retention_s": retention_s,
                "run_size": RUN_SIZE,
            },
        )
        migrate.apply(settings)
        return settings

    yield make
    for table in made:
        sql.execute(f"DROP TABLE IF EXISTS `{table}`, `{table}_runs`, `{table}_cursors`, `{table}_s`")


def lock_waits(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "(1205," in r.getMessage()]


def drain(worker: Worker, within_s: float = 30.0) -> None:
    """Tick until idle; a worker whose finishes keep waiting on the holder's rows never gets there."""
    deadline = time.monotonic() + within_s
    try:
        while not worker.tick().idle:
            assert time.monotonic() < deadline, f"the worker was not done within {within_s:g} s"
    finally:
        worker.close()


@pytest.mark.parametrize("retention_s", [0, 3600], ids=["deleted", "kept"])
def test_a_run_held_by_another_session_never_stalls_the_start_or_finish_of_others(
    jobs_settings: Callable[[int], Settings],
    holder: pymysql.cursors.Cursor,
    sql: pymysql.cursors.Cursor,
    caplog: pytest.LogCaptureFixture,
    retention_s: int,
) -> None:
    caplog.set_level(logging.WARNING)
    RAN.clear()
    settings = jobs_settings(retention_s)
    enqueuer = Enqueuer(settings, None)
    ids = [enqueuer.enqueue("counted", n) for n in range(JOBS)]
    enqueuer.db.close()
    src = settings.source("jobs.default")
    store = JobStore(Database(settings.mysql), src, settings.jobs, settings.mysql)
    entries = sorted(store.claim_due(100), key=lambda e: e.id)
    assert len(entries) == JOBS // RUN_SIZE
    runs, held = settings.jobs.runs_table, entries[-1]
    # The newest run and its jobs, locked as another worker's start or finish holds them.
    holder.execute(f"SELECT members FROM `{runs}` WHERE id = %s FOR UPDATE", (held.id,))
    held_jobs = sorted(decode_members(str(holder.fetchone()[0])))
    marks = ", ".join(["%s"] * len(held_jobs))
    holder.execute(f"SELECT id FROM `{settings.jobs.table}` WHERE id IN ({marks}) FOR UPDATE", held_jobs)
    queue = ReadyQueue(connect_redis(settings.redis), Keys(settings.redis.key_prefix))
    queue.push(src.name, entries[:-1])
    worker = Worker(
        {src.name: cast(Store, store)},
        {src.name: handlers.handler("jobs")},
        queue,
        WorkerSettings(block_timeout_s=0.1),
    )
    drain(worker)
    queue.client.close()

    assert lock_waits(caplog) == []  # before: the start and the finish each waited out lock_wait_s
    others = sorted(set(ids) - set(held_jobs))
    assert sorted(RAN) == sorted(int(p) for p in range(JOBS) if ids[p] in others)
    assert set(RAN.values()) == {1}
    assert (worker.counts["acked"], worker.counts["stale_acks"]) == (len(others), 0)
    sql.execute(f"SELECT id, dc_state FROM `{settings.jobs.table}`")
    states = {int(i): int(s) for i, s in sql.fetchall()}
    done = {i: State.DONE for i in others} if retention_s else {}
    assert states == {**done, **dict.fromkeys(held_jobs, State.IDLE)}  # the held run's jobs untouched
    sql.execute(f"SELECT id, dc_state FROM `{runs}`")
    assert sql.fetchall() == ((held.id, State.DISPATCHED),)  # the others' runs are gone
    store.db.close()


def test_a_row_held_by_another_session_never_stalls_a_one_off_delete(
    make_env: Callable[..., Env], holder: pymysql.cursors.Cursor, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    env = make_env("oneoff", rows=6)
    entries = env.store.claim_due(100)
    holder.execute(f"SELECT id FROM `{env.table}` WHERE id = 6 FOR UPDATE")  # dispatched, then held
    env.queue.push(env.source.name, [e for e in entries if e.id != 6])
    handled: list[int] = []

    def handle(row: Row) -> Ack:
        handled.append(int(row["id"]))
        return Ack()

    worker = Worker(
        {env.source.name: cast(Store, env.store)},
        {env.source.name: Handler(env.source.name, handle, batch=False)},
        env.queue,
        WorkerSettings(block_timeout_s=0.1),
    )
    drain(worker)

    assert sorted(handled) == [1, 2, 3, 4, 5]
    assert lock_waits(caplog) == []
    assert env.states() == {6: (State.DISPATCHED, 1)}  # the others deleted by their acks


@pytest.fixture
def ranged(
    mysql_settings: MySQLSettings, redis_settings: RedisSettings, sql: pymysql.cursors.Cursor
) -> Iterator[Settings]:
    """A range-mode source over a fresh table of users 1..6 (one span), migrated; dropped after
    (ask for it before `holder`, so the holder's locks are gone by then)."""
    src = range_app.users_source(sql, 6)
    settings = Settings(
        mysql=mysql_settings.model_copy(update={"lock_wait_s": 1}),
        redis=redis_settings,
        sources=[src],
        jobs={"enabled": False},  # type: ignore[arg-type]
        worker={"app": "tests.integration.range_app"},  # type: ignore[arg-type]
    )
    migrate.apply(settings)
    range_app.PLAN.reset()
    yield settings
    sql.execute(f"DROP TABLE IF EXISTS `{src.table}`, `{ranges_table(src)}`")


def test_a_row_held_by_another_session_never_stalls_a_range_batchs_deletes(
    ranged: Settings,
    holder: pymysql.cursors.Cursor,
    sql: pymysql.cursors.Cursor,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A span of six users on a six-row table: five checks delete their rows while the sixth
    user's row is held (an application's open transaction); the batch's DELETE dives by the key,
    so it neither waits on that row nor touches it."""
    caplog.set_level(logging.WARNING)
    table = ranged.sources[0].table
    range_app.PLAN.delete = {1, 2, 3, 4, 5}
    holder.execute(f"SELECT user_id FROM `{table}` WHERE user_id = 6 FOR UPDATE")
    serve_dispatcher(ranged, threading.Event(), drain=True)
    worker = serve_worker(ranged, threading.Event(), drain=True)

    assert lock_waits(caplog) == []
    assert range_app.PLAN.runs == dict.fromkeys(range(1, 7), 1)  # each user checked once
    assert (worker.counts["acked"], worker.counts["stale_acks"]) == (6, 0)
    sql.execute(f"SELECT user_id FROM `{table}`")
    assert sql.fetchall() == ((6,),)  # the five deleted, the held row untouched


def test_a_job_held_by_another_session_never_stalls_the_pruner(
    jobs_settings: Callable[[int], Settings], holder: pymysql.cursors.Cursor, sql: pymysql.cursors.Cursor
) -> None:
    """Five done jobs past their retention and a sixth, pending, held (a worker's open start or
    finish, or an application's transaction): the pruner deletes the five without waiting on it."""
    settings = jobs_settings(3600)
    enqueuer = Enqueuer(settings, None)
    ids = [enqueuer.enqueue("counted", n) for n in range(6)]
    enqueuer.db.close()
    table = settings.jobs.table
    done, held = ids[:5], ids[5]
    marks = ", ".join(["%s"] * len(done))
    sql.execute(  # finished two hours ago: time passes by back-dating the column
        f"UPDATE `{table}` SET dc_state = %s, run_at = NOW(6) - INTERVAL 2 HOUR WHERE id IN ({marks})",
        (State.DONE, *done),
    )
    holder.execute(f"SELECT id FROM `{table}` WHERE id = %s FOR UPDATE", (held,))
    store = JobStore(Database(settings.mysql), settings.source("jobs.default"), settings.jobs, settings.mysql)
    try:
        assert store.prune(100) == 5  # before: (1205, 'Lock wait timeout exceeded')
    finally:
        store.db.close()
    sql.execute(f"SELECT id, dc_state FROM `{table}`")
    assert sql.fetchall() == ((held, State.IDLE),)


# action -> (the state the five jobs are put in first, the state each is left in: None = deleted)
OPERATOR_ACTIONS = {
    "cancel": (State.IDLE, State.CANCELLED),
    "discard": (State.DEAD, None),
    "revive": (State.DEAD, State.IDLE),
}


@pytest.mark.parametrize("action", sorted(OPERATOR_ACTIONS))
def test_a_job_held_by_another_session_never_stalls_an_operator_command(
    jobs_settings: Callable[[int], Settings],
    holder: pymysql.cursors.Cursor,
    sql: pymysql.cursors.Cursor,
    action: str,
) -> None:
    """`duecast jobs cancel / discard / retry` on five jobs of a six-job table while the sixth is
    held: each changes the five by PRIMARY and waits on nothing."""
    before, after = OPERATOR_ACTIONS[action]
    settings = jobs_settings(3600)
    enqueuer = Enqueuer(settings, None)
    ids = [enqueuer.enqueue("counted", n) for n in range(6)]
    enqueuer.db.close()
    table, named, held = settings.jobs.table, [int(i) for i in ids[:5]], int(ids[5])
    marks = ", ".join(["%s"] * len(named))
    sql.execute(f"UPDATE `{table}` SET dc_state = %s WHERE id IN ({marks})", (before, *named))
    holder.execute(f"SELECT id FROM `{table}` WHERE id = %s FOR UPDATE", (held,))
    admin = JobAdmin(Database(settings.mysql), settings.jobs)
    try:
        outcome = getattr(admin, action)(Filter(ids=named))  # before: (1205, 'Lock wait timeout ...')
    finally:
        admin.db.close()

    assert (outcome.matched, outcome.changed) == (5, 5)
    sql.execute(f"SELECT id, dc_state FROM `{table}`")
    left = {} if after is None else dict.fromkeys(named, after)
    assert dict(sql.fetchall()) == {**left, held: State.IDLE}
