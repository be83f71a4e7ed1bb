"""RunBatch.give_back (a worker leaving with stuck threads, worker.Worker._give_back_unrun): a started
run none of whose jobs began goes back to pending, fenced on its attempt, with no job's attempt or
interruption counted; the next start runs each job once, as its first attempt. Real MariaDB."""

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
from duecast.shared.storage.leased.runs import RunBatch
from tests.faults.runs import drop_job_tables, runs

pytestmark = pytest.mark.integration


@pytest.fixture
def store(mysql_settings: MySQLSettings, sql: pymysql.cursors.Cursor) -> Iterator[JobStore]:
    table = f"jobs_{uuid.uuid4().hex[:8]}"
    settings = Settings(mysql=mysql_settings, jobs={"table": table, "schedules_table": f"{table}_s"})  # type: ignore[arg-type]
    migrate.apply(settings)
    enqueuer = Enqueuer(settings, None)
    enqueuer.enqueue_many(Job("record", {"n": i}) for i in range(3))
    enqueuer.db.close()
    made = JobStore(Database(mysql_settings), settings.source("jobs.default"), settings.jobs, mysql_settings)
    yield made
    made.close()
    drop_job_tables(sql, settings.jobs)


def test_a_run_given_back_unrun_is_pending_again_and_no_job_counts_it(
    store: JobStore, sql: pymysql.cursors.Cursor
) -> None:
    (entry,) = store.claim_due(10)
    batch = store.start([entry])
    assert isinstance(batch, RunBatch)
    assert len(batch.rows) == 3
    assert batch.give_back() == 1
    assert batch.give_back() == 0  # fenced: no longer RUNNING under that attempt
    (run,) = runs(sql, store.jobs)
    assert (run.id, run.state, run.attempt, len(run.members)) == (entry.id, int(State.IDLE), 1, 3)
    sql.execute(f"SELECT DISTINCT dc_state, dc_attempt, interruptions FROM `{store.jobs.table}`")
    assert sql.fetchall() == ((int(State.IDLE), 0, 0),)

    (again,) = store.claim_due(10)  # the pending run first, under a new attempt
    assert (again.id, again.attempt) == (entry.id, 2)
    with store.started([again]) as batch:
        assert {int(r["dc_attempt"]) for r in batch.rows} == {1}  # each job's first run
        batch.ack([(row, Ack.default()) for row in batch.rows])
    assert runs(sql, store.jobs) == []
