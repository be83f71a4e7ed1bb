"""Job runs on MariaDB: what the store contract (tests/unit/store_contract.py) proves of a per-row store,
proved of a job queue, whose entries are runs of jobs (docs/architecture.md, "Job runs"): claims in due
order, each job once; a start is a compare-and-set; fenced finishes; leases; sweeps; and the look behind
the cursors that finds a job whose insert committed late. Time passes by back-dating in SQL.
"""

from __future__ import annotations

from typing import Any

import pymysql
import pytest

from duecast.shared.acks import Ack
from duecast.shared.api.enqueue import Job
from duecast.shared.entries import Entry
from duecast.shared.queries.job_runs import RUN_ID_BASE
from duecast.shared.states import State
from duecast.shared.storage.db import connect
from duecast.shared.storage.leased.jobs import JobStore
from tests.integration.jobs.jobs_env import JobsEnv

pytestmark = pytest.mark.integration
RUN_SIZE = 2


@pytest.fixture
def runs_env(env: JobsEnv) -> JobsEnv:
    return env.with_jobs(run_size=RUN_SIZE)


def enqueue(env: JobsEnv, n: int, **job: Any) -> list[int]:
    return env.enqueuer.enqueue_many(Job("record", i, **job) for i in range(n))


def members(store: JobStore, entries: list[Entry]) -> list[list[int]]:
    """The jobs each entry's run started (started and closed unacked: their leases run on)."""
    out = []
    for entry in entries:
        with store.started([entry]) as batch:
            out.append(sorted(int(r["id"]) for r in batch.rows))
    return out


def back_date_runs(env: JobsEnv, seconds: int = 3600) -> None:
    env.sql.execute(
        f"UPDATE `{env.settings.jobs.runs_table}` "
        "SET dc_dispatched_at = dc_dispatched_at - INTERVAL %s SECOND, "
        "lease_until = lease_until - INTERVAL %s SECOND",
        (seconds, seconds),
    )


# ---------------------------------------------------------------- claims


def test_claims_make_runs_of_due_jobs_in_order_each_job_once(runs_env: JobsEnv) -> None:
    store = runs_env.store()
    assert store.claim_due(10) == []
    ids = enqueue(runs_env, 5)
    first = store.claim_due(3)  # 3 jobs: a run of 2, then a run of 1
    assert [e.attempt for e in first] == [1, 1]
    assert all(e.id >= RUN_ID_BASE for e in first)
    rest = store.claim_due(10)
    assert store.claim_due(10) == []
    assert members(store, first + rest) == [ids[0:2], ids[2:3], ids[3:5]]
    assert runs_env.job(ids[0], "dc_state", "dc_attempt") == (State.IDLE, 0)  # no job row was written


def test_higher_priority_jobs_are_claimed_first_whatever_came_before(runs_env: JobsEnv) -> None:
    store = runs_env.store()
    low = enqueue(runs_env, 3, priority=5)
    high = enqueue(runs_env, 1, priority=0)
    later = enqueue(runs_env, 1, priority=5, delay_s=3600)  # not due
    runs = store.claim_due(10)
    assert members(store, runs) == [high, low[0:2], low[2:3]]
    runs_env.sql.execute(f"UPDATE `{runs_env.table}` SET run_at = NOW(6) WHERE id = %s", (later[0],))
    assert members(store, store.claim_due(10)) == [later]  # due now: ahead of the cursor


def test_a_job_whose_insert_committed_after_a_later_one_was_claimed_is_found_behind_the_cursor(
    runs_env: JobsEnv,
) -> None:
    """The gap a cursor leaves: a transaction's job, inserted first but committed after a later job
    was claimed. The claim's look behind the cursor takes it, and never a job a run holds."""
    store = runs_env.store()
    conn = connect(runs_env.settings.mysql)
    try:
        with conn.cursor() as cur:  # the application's transaction stays open
            cur.execute(f"INSERT INTO `{runs_env.table}` (task, payload) VALUES ('record', '\"slow\"')")
            slow = int(cur.lastrowid)
            fast = enqueue(runs_env, 1)  # its own transaction, committed now
            held = store.claim_due(10)
            assert members(store, held) == [fast]  # the cursor is past the open transaction's job
            conn.commit()
    finally:
        conn.close()
    behind = store.claim_due(10)
    assert members(store, behind) == [[slow]]
    assert store.claim_due(10) == []  # the runs in flight hold both: neither is taken again


def test_a_job_enqueued_with_a_past_run_at_is_claimed_behind_the_cursor(runs_env: JobsEnv) -> None:
    store = runs_env.store()
    (now,) = enqueue(runs_env, 1)
    assert members(store, store.claim_due(10)) == [[now]]
    runs_env.sql.execute(
        f"INSERT INTO `{runs_env.table}` (task, payload, run_at) "
        "VALUES ('record', '1', NOW(6) - INTERVAL 1 DAY)"
    )
    past = int(runs_env.sql.lastrowid)
    assert members(store, store.claim_due(10)) == [[past]]


# ---------------------------------------------------------------- starts


def test_a_start_takes_only_current_runs_and_hands_out_attempt_one(runs_env: JobsEnv) -> None:
    store = runs_env.store()
    ids = enqueue(runs_env, 3)
    a, b = store.claim_due(10)
    asked = [a, Entry(b.id, 2), Entry(b.id + 100, 1), Entry(ids[0], 1)]  # a later attempt, no run, a job id
    with store.started(asked) as batch:
        assert sorted((r["id"], r["dc_attempt"]) for r in batch.rows) == [(ids[0], 1), (ids[1], 1)]
        assert batch.skipped == 3


def test_a_start_is_a_compare_and_set(runs_env: JobsEnv) -> None:
    store, other = runs_env.store(), runs_env.store()
    enqueue(runs_env, 2)
    (run,) = store.claim_due(10)
    first = store.start([run])
    try:
        with other.started([run]) as copy:
            assert (copy.rows, copy.skipped) == ([], 1)
        first.ack([(first.rows[0], Ack.default())])
    finally:
        first.close()
    with other.started([run]) as copy:  # its other job was never acked: the run stays started
        assert (copy.rows, copy.skipped) == ([], 1)
    assert runs_env.runs("dc_state", "jobs") == [(State.RUNNING, 1)]


# ---------------------------------------------------------------- finishes


def test_acks_finish_jobs_and_take_them_out_of_their_run_which_goes_with_its_last(runs_env: JobsEnv) -> None:
    store = runs_env.store()
    ids = enqueue(runs_env, 2)
    (run,) = store.claim_due(10)
    with store.started([run]) as batch:
        one, two = sorted(batch.rows, key=lambda r: int(r["id"]))
        assert batch.ack([(one, Ack.default())]).acked == 1
        assert runs_env.runs("members", "jobs") == [(str(ids[1]), 1)]
        assert batch.ack([(two, Ack.default())]).acked == 1
    assert runs_env.runs("id") == []
    assert not any(runs_env.exists(i) for i in ids)
    assert store.claim_due(10) == []


def test_a_failed_job_leaves_its_run_for_its_backoff_and_runs_again_under_the_next_attempt(
    runs_env: JobsEnv,
) -> None:
    store = runs_env.store()
    (job,) = runs_env.enqueuer.enqueue_many([Job("fail_always", "f")])
    (run,) = store.claim_due(10)
    with store.started([run]) as batch:
        batch.fail([(batch.rows[0], RuntimeError("boom"))])
    state, errors, attempt, later = runs_env.job(job, "dc_state", "errors", "dc_attempt", "run_at > NOW(6)")
    assert (state, errors, attempt, later) == (State.IDLE, 1, 1, 1)
    assert runs_env.runs("id") == []
    assert store.claim_due(10) == []  # not due before its backoff
    runs_env.make_due()
    (again,) = store.claim_due(10)
    with store.started([again]) as batch:
        assert [(r["id"], r["dc_attempt"]) for r in batch.rows] == [(job, 2)]


def test_a_late_ack_after_the_run_was_interrupted_and_its_jobs_reclaimed_is_stale(runs_env: JobsEnv) -> None:
    store = runs_env.store()
    ids = enqueue(runs_env, 2)
    (run,) = store.claim_due(10)
    slow = store.start([run])
    slow.close()  # its worker stalls: no renewals
    back_date_runs(runs_env)
    assert store.requeue_interrupted(100) == 2
    again = store.claim_due(10)  # interrupted once: suspects, in runs of their own
    counts = slow.ack([(row, Ack.default()) for row in slow.rows])
    assert (counts.acked, counts.stale) == (0, 2)
    assert all(runs_env.exists(i) for i in ids)
    started = [row for entries in members(store, again) for row in entries]
    assert sorted(started) == ids
    assert {runs_env.job(i, "interruptions")[0] for i in ids} == {1}


# ---------------------------------------------------------------- sweeps


def test_a_lease_that_ran_out_is_interrupted_once_and_an_open_run_is_not_swept(runs_env: JobsEnv) -> None:
    store, other = runs_env.store(), runs_env.store()
    ids = enqueue(runs_env, 4)
    open_run, dead_run = store.claim_due(10)
    back_date_runs(runs_env)  # both dispatched an hour ago
    with store.started([open_run]):
        with store.started([dead_run]):
            pass  # its worker died
        back_date_runs(runs_env, 1)  # not enough to end a fresh lease
        assert other.requeue_expired(60, 100) == 0
        runs_env.sql.execute(
            f"UPDATE `{runs_env.settings.jobs.runs_table}` SET lease_until = NOW(6) - INTERVAL 1 SECOND "
            "WHERE id = %s",
            (dead_run.id,),
        )
        assert other.requeue_expired(60, 100) == 2  # the dead run's two jobs; the open one is leased
        assert other.requeue_expired(60, 100) == 0
    assert [runs_env.job(i, "interruptions")[0] for i in ids] == [0, 0, 1, 1]


def test_runs_dispatched_and_never_started_go_back_under_a_new_attempt(runs_env: JobsEnv) -> None:
    store = runs_env.store()
    ids = enqueue(runs_env, 3)
    runs = store.claim_due(10)
    back_date_runs(runs_env, 30)
    assert store.requeue_expired(60, 100) == 0  # within the visibility timeout
    back_date_runs(runs_env)
    assert store.requeue_expired(60, 1) == 2  # one run, of two jobs
    assert store.requeue_expired(60, 100) == 1
    again = store.claim_due(10)
    assert again == [Entry(e.id, 2) for e in runs]
    assert members(store, again) == [ids[0:2], ids[2:3]]


def test_jobs_an_older_duecast_left_in_flight_on_their_rows_are_swept_and_run_in_runs(
    runs_env: JobsEnv,
) -> None:
    store = runs_env.store()
    dispatched, running, live = enqueue(runs_env, 3)
    runs_env.sql.execute(
        f"UPDATE `{runs_env.table}` SET dc_state = CASE id WHEN %s THEN 1 ELSE 2 END, dc_attempt = 1, "
        "dc_dispatched_at = NOW(6) - INTERVAL 1 HOUR, "
        "lease_until = IF(id = %s, NOW(6) + INTERVAL 1 HOUR, NOW(6) - INTERVAL 1 SECOND)",
        (dispatched, live),
    )
    assert store.claim_due(10) == []  # in flight, as far as their rows say
    assert store.requeue_expired(60, 100) == 2  # the live lease is left to run out
    assert members(store, store.claim_due(10)) == [[dispatched, running]]
    assert runs_env.job(live, "dc_state") == (State.RUNNING,)


def test_a_refused_push_gives_the_runs_back_at_once(runs_env: JobsEnv) -> None:
    store = runs_env.store()
    enqueue(runs_env, 3)
    runs = store.claim_due(10)
    assert store.release_unpushed(runs) == 3
    assert store.claim_due(10) == [Entry(e.id, 2) for e in runs]


def test_the_status_counts_jobs_in_runs_as_in_flight(runs_env: JobsEnv, sql: pymysql.cursors.Cursor) -> None:
    store = runs_env.store()
    enqueue(runs_env, 5)
    enqueue(runs_env, 1, delay_s=3600)
    first, _ = store.claim_due(4)  # 2 + 2 dispatched; 1 due and 1 scheduled left
    with store.started([first]):
        status = store.status()
    assert status.in_flight == 4
    assert status.detail is not None
    assert {k: status.detail[k] for k in ("pending", "due", "scheduled", "dispatched", "running")} == {
        "pending": 2,
        "due": 1,
        "scheduled": 1,
        "dispatched": 2,
        "running": 2,
    }


# ---------------------------------------------------------------- started_at (issue 26.7)


def test_every_finished_job_records_when_its_run_started(runs_env: JobsEnv) -> None:
    """A job's own row is not written while its run runs: each finish (done and kept, retried,
    snoozed, dead, interrupted) writes the run's started_at into it, so `duecast jobs show` says
    when the last attempt began. Before, started_at stayed NULL for every job that ran in a run."""
    env = runs_env.with_jobs(retention_s=3600)
    store = env.store()
    done, retried, snoozed = enqueue(env, 3)
    (dead,) = env.enqueuer.enqueue_many([Job("record", "d", max_attempts=1)])
    (run, other) = store.claim_due(10)
    with store.started([run, other]) as batch:
        rows = {int(r["id"]): r for r in batch.rows}
        (began,) = set(env.runs("started_at"))  # both runs started by one statement
        assert batch.ack([(rows[done], Ack.default()), (rows[snoozed], Ack.retry(delay_s=600))]).acked == 2
        batch.fail([(rows[retried], RuntimeError("boom")), (rows[dead], RuntimeError("boom"))])
    for job in (done, retried, snoozed, dead):
        assert env.job(job, "started_at") == began, job
    assert env.job(done, "dc_state", "finished_at >= started_at") == (State.DONE, 1)
    assert env.job(retried, "dc_state", "errors") == (State.IDLE, 1)
    assert env.job(dead, "dc_state")[0] == State.DEAD
    # An interrupted run: its jobs record the start of the run their worker died in.
    (late,) = enqueue(env, 1)
    (run,) = store.claim_due(10)
    store.start([run]).close()  # its worker stalls: no renewals
    (began_late,) = env.runs("started_at")
    back_date_runs(env)
    assert store.requeue_interrupted(100) == 1
    assert began_late[0] is not None
    assert env.job(late, "started_at") == began_late
