"""Self-fencing with a real worker process (issue 4): a worker whose leases cannot be renewed, or
whose lease was taken from it, exits without acking before another worker can run its job; one whose
lease keeper merely lost its session renews on a new one and carries on.

The job parks its worker until the test opens a gate file. Leases are 6 s (renewed every 2 s, the
fence at 4.8 s): the one thing that must take lease time is the fence itself.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pymysql
import pytest

from duecast.shared.api.enqueue import Enqueuer
from duecast.shared.fanout.client import connect_redis
from duecast.shared.fanout.keys import Keys
from duecast.shared.fanout.queue import ReadyQueue
from duecast.shared.settings import MySQLSettings, RedisSettings, Settings
from duecast.shared.states import State
from duecast.shared.storage.admin import migrate
from duecast.shared.storage.db import Database, connect
from duecast.shared.storage.leased.jobs import JobStore
from duecast.shared.storage.leased.keeper import EXIT_FENCED
from duecast.shared.storage.worker_registry import worker_name
from tests.faults.conftest import _NOT_INHERITED, SESSION_LOST
from tests.faults.procs import Proc, Procs, tcp_peers, wait_for
from tests.faults.runs import drop_job_tables, expire_runs, run_of

pytestmark = pytest.mark.faults

LEASE_S = 6.0
KEEPER_TIMEOUT_S = 0.5  # 6/3 + 2 * 0.5 = 3 s < the fence at 4.8 s (settings validation)
WAIT_S = 20.0


@dataclass
class Fencing:
    settings: Settings
    env: dict[str, str]
    store: JobStore
    sql: pymysql.cursors.Cursor
    procs: Procs
    gate: Path

    def row(self, job_id: int, *columns: str) -> tuple[Any, ...]:
        self.sql.execute(
            f"SELECT {', '.join(columns)} FROM `{self.settings.jobs.table}` WHERE id = %s", (job_id,)
        )
        found = self.sql.fetchone()
        return tuple(found) if found is not None else ()

    def run(self, job_id: int, *columns: str) -> tuple[Any, ...]:
        """Columns of the run holding the job (its lease is the run's); () once none holds it."""
        found = run_of(self.sql, self.settings.jobs, job_id)
        if found is None:
            return ()
        self.sql.execute(
            f"SELECT {', '.join(columns)} FROM `{self.settings.jobs.runs_table}` WHERE id = %s", (found.id,)
        )
        return tuple(self.sql.fetchone() or ())

    def start_parked_job(self) -> tuple[int, Proc]:
        """A `park` job, claimed and pushed, and a worker running it (its run RUNNING, committed)."""
        enqueuer = Enqueuer(self.settings, None)
        job_id = enqueuer.enqueue("park", "p")
        enqueuer.db.close()
        queue = ReadyQueue(connect_redis(self.settings.redis), Keys(self.settings.redis.key_prefix))
        queue.push(self.store.src.name, self.store.claim_due(10))
        worker = self.procs.spawn(
            "worker",
            ["-m", "duecast.worker", "--app", "tests.integration.jobs_app"],
            self.env,
            allow=SESSION_LOST,
        )
        wait_for(
            lambda: self.run(job_id, "dc_state") == (State.RUNNING,),
            WAIT_S,
            "the job to start",
            self.procs.check,
        )
        return job_id, worker

    def lease_left_s(self, job_id: int) -> float:
        (left_us,) = self.run(job_id, "TIMESTAMPDIFF(MICROSECOND, NOW(6), lease_until)")
        return float(left_us) / 1e6


@pytest.fixture
def fencing(
    mysql_settings: MySQLSettings,
    redis_settings: RedisSettings,
    sql: pymysql.cursors.Cursor,
    procs: Procs,
    tmp_path: Path,
    *,
    request: pytest.FixtureRequest,
) -> Iterator[Fencing]:
    table = f"jobs_{uuid.uuid4().hex[:8]}"
    jobs = {"table": table, "schedules_table": f"{table}_s", "lease_s": LEASE_S, "timeout_s": 600}
    jobs.update(getattr(request, "param", {}))  # a test's own jobs settings (indirect parametrize)
    mysql = mysql_settings.model_copy(update={"lease_keeper_timeout_s": KEEPER_TIMEOUT_S})
    settings = Settings(mysql=mysql, redis=redis_settings, jobs=jobs)  # type: ignore[arg-type]
    migrate.apply(settings)
    env = {k: v for k, v in os.environ.items() if not k.startswith(_NOT_INHERITED)}
    env.update(
        {
            "DUECAST_MYSQL__DATABASE": mysql_settings.database,
            "DUECAST_MYSQL__LEASE_KEEPER_TIMEOUT_S": str(KEEPER_TIMEOUT_S),
            "DUECAST_REDIS__URL": redis_settings.url.get_secret_value(),
            "DUECAST_REDIS__KEY_PREFIX": redis_settings.key_prefix,
            "DUECAST_JOBS": json.dumps(jobs),
            "DUECAST_WORKER__BLOCK_TIMEOUT_S": "0.5",
            "DUECAST_TEST_GATE": str(tmp_path / "gate"),
            "PYTHONUNBUFFERED": "1",
        }
    )
    store = JobStore(Database(mysql), settings.source("jobs.default"), settings.jobs, mysql)
    yield Fencing(settings, env, store, sql, procs, tmp_path / "gate")
    procs.kill_all()
    store.db.close()
    drop_job_tables(sql, settings.jobs)


def test_a_worker_that_cannot_renew_its_lease_exits_unacked_before_the_lease_runs_out(
    fencing: Fencing, mysql_settings: MySQLSettings
) -> None:
    job_id, worker = fencing.start_parked_job()
    (run_id,) = fencing.run(job_id, "id")
    holder = connect(mysql_settings)  # holds the job's run's row: every renewal skips it, none confirms
    try:
        with holder.cursor() as cur:
            cur.execute(
                f"SELECT id FROM `{fencing.settings.jobs.runs_table}` WHERE id = %s FOR UPDATE", (run_id,)
            )
        assert fencing.procs.wait_exit(worker, WAIT_S) == EXIT_FENCED
        left_s = fencing.lease_left_s(job_id)
    finally:
        holder.rollback()
        holder.close()
    assert left_s > 0, "the worker was still running when its lease ran out"
    assert "no confirmed lease renewal" in worker.log.read_text()
    # Never acked: its run still RUNNING under its first attempt, for the sweeper once the lease is
    # out; the job's own row untouched (pending, no run of it ended).
    assert fencing.run(job_id, "dc_state", "dc_attempt") == (State.RUNNING, 1)
    assert fencing.row(job_id, "dc_state", "dc_attempt", "finished_at") == (State.IDLE, 0, None)
    assert expire_runs(fencing.sql, fencing.settings.jobs) == 1
    assert fencing.store.requeue_expired(60, 10) == 1
    assert fencing.row(job_id, "dc_state", "interruptions") == (State.IDLE, 1)
    assert fencing.run(job_id, "id") == ()


def test_a_worker_whose_lease_was_taken_exits_at_its_next_renewal(fencing: Fencing) -> None:
    job_id, worker = fencing.start_parked_job()
    # The run's lease "ran out" and the sweeper gave the job back, under the parked handler.
    assert expire_runs(fencing.sql, fencing.settings.jobs) == 1
    assert fencing.store.requeue_expired(60, 10) == 1
    assert fencing.procs.wait_exit(worker, LEASE_S) == EXIT_FENCED  # at the next renewal, every 2 s
    assert "lost a lease" in worker.log.read_text()
    # Pending again, its interrupted run counted (dc_attempt counts a job's ended runs).
    assert fencing.row(job_id, "dc_state", "dc_attempt", "interruptions") == (State.IDLE, 1, 1)


def test_a_lease_keeper_whose_session_was_killed_renews_on_a_new_one(fencing: Fencing) -> None:
    job_id, worker = fencing.start_parked_job()
    fencing.sql.execute(
        "SELECT ID, HOST FROM information_schema.PROCESSLIST WHERE DB = %s",
        (fencing.settings.mysql.database,),
    )
    ports = {str(local) for local, remote in tcp_peers(worker.pid) if remote == fencing.settings.mysql.port}
    sessions = [int(i) for i, host in fencing.sql.fetchall() if str(host).rsplit(":", 1)[-1] in ports]
    (before,) = fencing.run(job_id, "lease_until")
    for session in sessions:  # the keeper's among them, and the worker's own
        fencing.sql.execute(f"KILL {session}")
    wait_for(
        lambda: fencing.run(job_id, "lease_until")[0] > before,
        WAIT_S,
        "a renewal on a new session",
        fencing.procs.check,
    )
    second = fencing.run(job_id, "lease_until")[0]
    wait_for(
        lambda: fencing.run(job_id, "lease_until")[0] > second,
        WAIT_S,
        "the next renewal",
        fencing.procs.check,
    )
    assert worker.alive()
    fencing.gate.touch()  # the job ends and is acked on a new session too
    wait_for(
        lambda: fencing.row(job_id, "dc_state") == (), WAIT_S, "the job to be acked", fencing.procs.check
    )
    assert worker.alive()


@pytest.mark.parametrize("fencing", [{"run_size": 1}], indirect=True)
def test_a_fencing_worker_hands_back_the_batch_it_popped_and_had_not_started(
    fencing: Fencing, mysql_settings: MySQLSettings
) -> None:
    """Issue 24.5: before its exit (69) the worker pushes its hold (popped, not started) back to the
    head of the ready list at once; before, it waited for a supervisor, the leader or the visibility
    timeout. Here two suspect jobs wait in the popped batch for the parked clean one's run to end."""
    enqueuer = Enqueuer(fencing.settings, None)
    park = enqueuer.enqueue("park", "p")
    suspects = [enqueuer.enqueue("record", f"s{i}") for i in range(2)]
    enqueuer.db.close()
    table = fencing.settings.jobs.table
    fencing.sql.execute(f"UPDATE `{table}` SET interruptions = 1 WHERE id IN (%s, %s)", tuple(suspects))
    entries = fencing.store.claim_due(10)
    assert len(entries) == 2  # the clean job's run, and the suspects' (started after it, alone)
    queue = ReadyQueue(connect_redis(fencing.settings.redis), Keys(fencing.settings.redis.key_prefix))
    source = fencing.store.src.name
    queue.push(source, entries)
    worker = fencing.procs.spawn(
        "worker",
        ["-m", "duecast.worker", "--app", "tests.integration.jobs_app"],
        fencing.env,
        allow=SESSION_LOST,
    )
    wait_for(lambda: fencing.run(park, "dc_state") == (State.RUNNING,), WAIT_S, "the park job to start")
    name = worker_name(worker.pid)
    held = queue.held_by(name)
    assert held is not None
    assert len(held[1]) == 2, "the popped batch, its suspects not started"
    assert all(fencing.run(j, "dc_state") == (State.DISPATCHED,) for j in suspects)
    (run_id,) = fencing.run(park, "id")
    holder = connect(mysql_settings)  # no renewal of the park job's run confirms: the worker fences
    try:
        with holder.cursor() as cur:
            cur.execute(
                f"SELECT id FROM `{fencing.settings.jobs.runs_table}` WHERE id = %s FOR UPDATE", (run_id,)
            )
        assert fencing.procs.wait_exit(worker, WAIT_S) == EXIT_FENCED
        # At once, with no supervisor or leader running: the hold is back at the head of the list.
        assert queue.held_by(name) is None
        assert queue.length(source) == 2
        assert "pushed them back" in worker.log.read_text()
    finally:
        holder.rollback()
        holder.close()
    # Another worker runs the suspects under the attempt they were dispatched with; the parked job's
    # entry is stale (its run RUNNING, for the sweeper once its lease is out), so it runs nowhere.
    fencing.procs.spawn(
        "worker2",
        ["-m", "duecast.worker", "--app", "tests.integration.jobs_app"],
        fencing.env,
        allow=SESSION_LOST,
    )
    wait_for(
        lambda: all(fencing.row(j, "dc_state") == () for j in suspects),
        WAIT_S,
        "the handed-back suspects to run",
        fencing.procs.check,
    )
    assert fencing.run(park, "dc_state", "dc_attempt") == (State.RUNNING, 1)
