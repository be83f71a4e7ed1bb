"""One-off jobs on real MariaDB + Redis: retries with backoff, dead letters, explicit retry and discard,
interruptions, leases, transactional tasks, retention and pruning.

Time passes by back-dating run_at / lease_until / last_run_at in SQL, never by sleeping.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest

from duecast.dispatcher.pruner import Pruner
from duecast.shared.acks import Ack
from duecast.shared.states import State
from tests.integration import jobs_app
from tests.integration.jobs.jobs_env import JobsEnv, payloads
from tests.integration.polling import wait_until

pytestmark = pytest.mark.integration


# ---------------------------------------------------------------- failures, retries, dead letters


def test_a_job_that_always_raises_is_dead_after_exactly_max_attempts_with_its_error(env: JobsEnv) -> None:
    job_id = env.enqueuer.enqueue("fail_always", "x", max_attempts=3)

    env.run_once()
    state, errors, delay_s = env.job(
        job_id, "dc_state", "errors", "TIMESTAMPDIFF(MICROSECOND, NOW(6), run_at)"
    )
    # Pending again after the first backoff step: between half of retry_base_s and all of it.
    assert (state, errors) == (State.IDLE, 1)
    assert 4.5e6 <= delay_s <= 10e6
    env.run_once()
    assert payloads() == ["x"]  # not due yet: the backoff holds

    for _ in range(5):
        env.make_due()
        env.run_once()

    assert payloads() == ["x"] * 3
    state, errors, attempt, error, finished = env.job(
        job_id, "dc_state", "errors", "dc_attempt", "last_error", "finished_at IS NOT NULL"
    )
    assert (state, errors, attempt, finished) == (State.DEAD, 3, 3, 1)
    assert "RuntimeError: boom x" in error
    assert "Traceback (most recent call last)" in error


def test_backoff_grows_exponentially_between_failures(env: JobsEnv) -> None:
    job_id = env.enqueuer.enqueue("fail_always", "x")
    delays = []
    for _ in range(4):
        env.make_due()
        env.run_once()
        (delay,) = env.job(job_id, "TIMESTAMPDIFF(MICROSECOND, NOW(6), run_at) / 1e6")
        delays.append(float(delay))
    # retry_base_s = 10, equal jitter: failure n waits between 10 * 2^(n-1) / 2 and 10 * 2^(n-1).
    for n, d in enumerate(delays, start=1):
        step = 10 * 2 ** (n - 1)
        assert step / 2 - 1 <= d <= step, (n, delays)


def test_a_task_can_ask_for_a_retry_later_without_using_an_attempt(env: JobsEnv) -> None:
    job_id = env.enqueuer.enqueue("snooze_once", "s")
    env.run_once()
    state, errors, wait = env.job(job_id, "dc_state", "errors", "TIMESTAMPDIFF(SECOND, NOW(6), run_at)")
    assert (state, errors) == (State.IDLE, 0)
    assert 3590 <= wait <= 3600
    env.make_due()
    env.run_once()
    assert payloads() == ["s", "s"]
    assert not env.exists(job_id)


def test_a_retry_at_a_given_time_is_stored_in_the_databases_zone(env: JobsEnv) -> None:
    store = env.store()
    job_id = env.enqueuer.enqueue("record", "r")
    (entry,) = store.claim_due(10)
    at = datetime.now(UTC) + timedelta(hours=2)
    with store.started([entry]) as batch:
        assert batch.ack([(batch.rows[0], Ack.retry(at=at))]).acked == 1
    (diff,) = env.job(
        job_id, "TIMESTAMPDIFF(SECOND, UTC_TIMESTAMP(6), CONVERT_TZ(run_at, @@session.time_zone, '+00:00'))"
    )
    assert abs(diff - 7200) <= 60
    with pytest.raises(ValueError, match="timezone-aware"):
        Ack.retry(at=datetime.now())


def test_a_task_can_discard_its_job_which_is_kept_dead_with_the_reason(env: JobsEnv) -> None:
    job_id = env.enqueuer.enqueue("give_up", "g")
    env.run_once()
    state, errors, error = env.job(job_id, "dc_state", "errors", "last_error")
    assert (state, errors) == (State.DEAD, 0)
    assert error == "discarded by its task: nothing to do for g"


def test_an_interrupted_job_runs_again_and_is_dead_after_max_interruptions(env: JobsEnv) -> None:
    env = env.with_jobs(max_interruptions=2)
    store = env.store()
    job_id = env.enqueuer.enqueue("record", "i")
    for n in (1, 2):
        (entry,) = store.claim_due(10)
        with store.started([entry]):
            pass  # the worker "died" here: its run's RUNNING was committed, nothing finished it
        assert env.run_of(job_id, "dc_state", "worker IS NOT NULL") == (State.RUNNING, 1)
        assert env.job(job_id, "dc_state") == (State.IDLE,)  # a run's job row is not written until it ends
        assert store.requeue_expired(60, 100) == 0  # the lease still holds: not interrupted
        env.expire_leases()
        assert store.requeue_expired(60, 100) == 1
        assert env.runs("id") == []  # the interrupted run is gone
        state, interruptions, errors = env.job(job_id, "dc_state", "interruptions", "errors")
        assert (interruptions, errors) == (n, 0)
        assert state == (State.IDLE if n == 1 else State.DEAD)
    assert "interrupted 2 times" in env.job(job_id, "last_error")[0]
    assert store.claim_due(10) == []


def test_a_running_jobs_lease_is_extended_while_its_handler_runs(env: JobsEnv) -> None:
    env = env.with_jobs(lease_s=3)
    store = env.store()
    job_id = env.enqueuer.enqueue("record", "long")
    (entry,) = store.claim_due(10)
    with store.started([entry]):
        (first,) = env.run_of(job_id, "lease_until")

        def extended() -> bool:
            return bool(env.run_of(job_id, "lease_until")[0] > first)

        wait_until(extended, "the lease keeper to extend the lease", timeout_s=5)
        assert store.requeue_expired(60, 100) == 0


def test_a_late_ack_of_an_interrupted_run_is_stale(env: JobsEnv) -> None:
    store = env.store()
    job_id = env.enqueuer.enqueue("record", "late")
    (entry,) = store.claim_due(10)
    with store.started([entry]) as batch:
        env.expire_leases()
        assert store.requeue_expired(60, 100) == 1
        counts = batch.ack([(batch.rows[0], Ack.default())])
    assert (counts.acked, counts.stale) == (0, 1)
    assert env.job(job_id, "dc_state", "interruptions") == (State.IDLE, 1)


# ---------------------------------------------------------------- transactional tasks


@pytest.fixture
def accounts(env: JobsEnv) -> Iterator[str]:
    table = f"acct_{uuid.uuid4().hex[:8]}"
    env.sql.execute(f"CREATE TABLE `{table}` (id INT AUTO_INCREMENT PRIMARY KEY, account INT, amount INT)")
    yield table
    env.sql.execute(f"DROP TABLE IF EXISTS `{table}`")


def test_a_transactional_tasks_writes_commit_with_its_ack_or_not_at_all(env: JobsEnv, accounts: str) -> None:
    ok = env.enqueuer.enqueue("credit", {"table": accounts, "account": 1, "amount": 10})
    bad = env.enqueuer.enqueue("credit", {"table": accounts, "account": 2, "amount": 20, "then_fail": True})
    env.run_once()
    env.sql.execute(f"SELECT account, amount FROM `{accounts}`")
    assert env.sql.fetchall() == ((1, 10),)  # the failed run's insert was rolled back with it
    assert not env.exists(ok)
    state, errors, error = env.job(bad, "dc_state", "errors", "last_error")
    assert (state, errors) == (State.IDLE, 1)
    assert "failed after writing" in error


def test_a_transactional_tasks_writes_are_undone_when_its_ack_is_stale(env: JobsEnv, accounts: str) -> None:
    store = env.store()
    env.enqueuer.enqueue("credit", {"table": accounts, "account": 3, "amount": 30})
    (entry,) = store.claim_due(10)
    with store.started([entry]) as batch:
        env.expire_leases()
        assert store.requeue_expired(60, 100) == 1  # the run is interrupted: its job is pending again
        (outcome,) = jobs_app.handlers.handler("jobs").run(batch.rows)
        assert isinstance(outcome, Ack)
        counts = batch.ack([(batch.rows[0], outcome)])
    assert (counts.acked, counts.stale) == (0, 1)
    env.sql.execute(f"SELECT COUNT(*) FROM `{accounts}`")
    assert env.sql.fetchone()[0] == 0


# ---------------------------------------------------------------- retention and pruning


def test_done_jobs_are_kept_for_the_retention_then_pruned(env: JobsEnv) -> None:
    env = env.with_jobs(retention_s=3600, dead_retention_s=7200)
    done = env.enqueuer.enqueue("record", "d", unique_key="k1")
    dead = env.enqueuer.enqueue("give_up", "x")
    env.run_once()
    assert env.job(done, "dc_state", "unique_slot", "finished_at IS NOT NULL") == (State.DONE, None, 1)
    # Its unique key is free again once it is done.
    assert env.enqueuer.enqueue("record", "d2", unique_key="k1") > done
    pruner = Pruner(env.store(), batch=1, interval_s=60)
    pruner.prune_all()
    assert env.exists(done)
    assert env.exists(dead)
    env.sql.execute(
        f"UPDATE `{env.table}` SET run_at = NOW(6) - INTERVAL 3601 SECOND WHERE id IN (%s, %s)", (done, dead)
    )
    pruner.prune_all()
    assert not env.exists(done)
    assert env.exists(dead)  # dead jobs have their own, longer retention
    env.sql.execute(f"UPDATE `{env.table}` SET run_at = NOW(6) - INTERVAL 7201 SECOND WHERE id = %s", (dead,))
    pruner.prune_all()
    assert not env.exists(dead)
    assert pruner.pruned == 2
