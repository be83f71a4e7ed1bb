"""A paused task (shared.api.pauses, kind "task") on a job queue's store, against real MariaDB: its
jobs are left out of the claims while the queue's other tasks flow; a run dispatched before the pause
gives its paused members back at its start (they stay pending, in no run); resumed, the next claim
looks behind the cursors and every job runs, once."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pymysql
import pytest

from duecast.shared.acks import Ack
from duecast.shared.api.enqueue import Enqueuer, Job
from duecast.shared.settings import MySQLSettings, Settings
from duecast.shared.states import State
from duecast.shared.storage.admin import migrate
from duecast.shared.storage.db import Database
from duecast.shared.storage.leased.jobs import JobStore
from tests.faults.runs import drop_job_tables, runs

pytestmark = pytest.mark.integration

EACH = 8  # jobs of each task, enqueued interleaved: one run holds both tasks


@pytest.fixture
def store(mysql_settings: MySQLSettings, sql: pymysql.cursors.Cursor) -> Iterator[JobStore]:
    table = f"jobs_{uuid.uuid4().hex[:8]}"
    jobs = {"table": table, "schedules_table": f"{table}_s", "retention_s": 3600}  # done jobs kept: counted
    settings = Settings(mysql=mysql_settings, jobs=jobs)  # type: ignore[arg-type]
    migrate.apply(settings)
    enqueuer = Enqueuer(settings, None)
    enqueuer.enqueue_many(Job("slow" if i % 2 else "fast", {"n": i}) for i in range(2 * EACH))
    enqueuer.db.close()
    made = JobStore(Database(mysql_settings), settings.source("jobs.default"), settings.jobs, mysql_settings)
    yield made
    made.close()
    drop_job_tables(sql, settings.jobs)


def run_all(store: JobStore) -> list[str]:
    """Claim, start and finish (done) whatever the queue hands out now; the tasks that ran."""
    ran: list[str] = []
    entries = store.claim_due(1000)
    for entry in entries:
        with store.started([entry]) as batch:
            ran += [str(r["task"]) for r in batch.rows]
            batch.ack([(row, Ack.default()) for row in batch.rows])
    return sorted(ran)


def pending(sql: pymysql.cursors.Cursor, store: JobStore) -> dict[str, int]:
    sql.execute(
        f"SELECT task, COUNT(*) FROM `{store.jobs.table}` WHERE dc_state = {int(State.IDLE)} GROUP BY task"
    )
    return {str(t): int(n) for t, n in sql.fetchall()}


def test_a_paused_tasks_jobs_are_not_claimed_the_others_run_and_resumed_all_run_once(
    store: JobStore, sql: pymysql.cursors.Cursor
) -> None:
    store.paused_tasks = lambda: frozenset({"slow"})
    assert run_all(store) == ["fast"] * EACH
    assert run_all(store) == []  # the cursors passed the paused jobs; the look behind leaves them out
    assert pending(sql, store) == {"slow": EACH}
    assert runs(sql, store.jobs) == []

    store.paused_tasks = frozenset
    assert run_all(store) == ["slow"] * EACH  # resumed: found behind the cursors at once
    assert pending(sql, store) == {}
    assert runs(sql, store.jobs) == []


def test_a_run_dispatched_before_the_pause_gives_its_paused_members_back_at_its_start(
    store: JobStore, sql: pymysql.cursors.Cursor
) -> None:
    (entry,) = store.claim_due(1000)  # one run of both tasks, dispatched while nothing was paused
    store.paused_tasks = lambda: frozenset({"slow"})
    with store.started([entry]) as batch:
        assert sorted(str(r["task"]) for r in batch.rows) == ["fast"] * EACH
        (run,) = runs(sql, store.jobs, State.RUNNING)
        assert len(run.members) == EACH  # the paused members left the run in the start's transaction
        batch.ack([(row, Ack.default()) for row in batch.rows])
    assert runs(sql, store.jobs) == []
    assert pending(sql, store) == {"slow": EACH}  # nothing lost: pending, in no run
    assert run_all(store) == []  # still paused: not claimed again

    store.paused_tasks = frozenset
    assert run_all(store) == ["slow"] * EACH
    sql.execute(f"SELECT DISTINCT dc_state, dc_attempt, errors FROM `{store.jobs.table}`")
    assert sql.fetchall() == ((int(State.DONE), 1, 0),)  # each ran once, its first attempt


def test_a_run_of_paused_members_only_goes_at_its_start(store: JobStore, sql: pymysql.cursors.Cursor) -> None:
    store.paused_tasks = lambda: frozenset({"fast"})
    (slow,) = store.claim_due(1000)
    store.paused_tasks = lambda: frozenset({"fast", "slow"})
    with store.started([slow]) as batch:
        assert batch.rows == []
    assert runs(sql, store.jobs) == []
    assert pending(sql, store) == {"fast": EACH, "slow": EACH}
    store.paused_tasks = frozenset
    assert run_all(store) == ["fast"] * EACH + ["slow"] * EACH
