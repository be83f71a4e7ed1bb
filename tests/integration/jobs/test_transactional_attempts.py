"""A transactional task's attempt runs once on real MariaDB: a lock wait at its ack fails the attempt
rather than calling the task again, and a slow one does not make its own worker fence itself.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pymysql
import pytest

from duecast.shared.acks import Ack
from duecast.shared.settings import MySQLSettings
from duecast.shared.states import State
from duecast.shared.storage.db import connect
from tests.integration.jobs.jobs_env import JobsEnv, payloads

pytestmark = pytest.mark.integration


@pytest.fixture
def accounts(env: JobsEnv) -> Iterator[str]:
    table = f"acct_{uuid.uuid4().hex[:8]}"
    env.sql.execute(f"CREATE TABLE `{table}` (id INT PRIMARY KEY, amount INT)")
    env.sql.execute(f"INSERT INTO `{table}` VALUES (1, 0)")
    yield table
    env.sql.execute(f"DROP TABLE IF EXISTS `{table}`")


def test_a_lock_wait_at_a_transactional_ack_never_calls_the_task_twice_under_one_attempt(
    env: JobsEnv, accounts: str, mysql_settings: MySQLSettings
) -> None:
    env = JobsEnv(
        env.settings.model_copy(update={"mysql": env.settings.mysql.model_copy(update={"lock_wait_s": 1})}),
        env.sql,
    )
    calls: list[int] = []

    def credit(cur: Any) -> None:
        calls.append(1)
        cur.execute(f"UPDATE `{accounts}` SET amount = amount + 1 WHERE id = 1")

    job_id = env.enqueuer.enqueue("record", "x")
    store = env.store()
    (entry,) = store.claim_due(10)
    holder = connect(mysql_settings)  # another session holds the row the task writes
    try:
        with holder.cursor() as cur:
            cur.execute("BEGIN")
            cur.execute(f"SELECT amount FROM `{accounts}` WHERE id = 1 FOR UPDATE")
            with store.started([entry]) as batch:
                (row,) = batch.rows
                first = batch.ack([(row, Ack("transaction", work=credit))])
                # The worker's acker hands the same outcome back after an ack that raised: still once.
                batch.ack([(row, Ack("transaction", work=credit))])
        holder.rollback()
    finally:
        holder.close()
    assert len(calls) == 1
    assert (first.acked, first.refused) == (0, 1)
    state, errors, attempt, error = env.job(job_id, "dc_state", "errors", "dc_attempt", "last_error")
    assert (state, errors, attempt) == (State.IDLE, 1, 1)  # that attempt failed; a new one runs it
    assert "SpentAttempt" in error
    assert "1205" in error
    env.sql.execute(f"SELECT amount FROM `{accounts}` WHERE id = 1")
    assert env.sql.fetchone() == (0,)


def test_a_slow_transactional_task_does_not_make_its_worker_fence_itself(env: JobsEnv, accounts: str) -> None:
    env = env.with_jobs(lease_s=3)  # the keeper fences at 0.8 of it without a confirmed renewal
    slow_job = env.enqueuer.enqueue("record", "slow")
    other_job = env.enqueuer.enqueue("record", "other")  # same run: still running after the ack
    store = env.store()
    stops: list[int] = []
    store._leases._stop = stops.append  # the keeper's exit, recorded instead of taken

    def slow(cur: Any) -> None:
        cur.execute(f"UPDATE `{accounts}` SET amount = amount + 1 WHERE id = 1")
        time.sleep(3.5)  # the task's own work: longer than the lease, holding its run's lock

    (entry,) = store.claim_due(10)
    with store.started([entry]) as batch:
        assert len(batch.rows) == 2
        (row,) = [r for r in batch.rows if r["id"] == slow_job]
        counts = batch.ack([(row, Ack("transaction", work=slow))])
        # The ack extended the lease of the run it held, as it ended: the other job's is good for a lease.
        (left_s,) = env.run_of(other_job, "TIMESTAMPDIFF(MICROSECOND, NOW(6), lease_until) / 1e6")
        assert left_s > 2.5
        assert stops == []
        (rest,) = [r for r in batch.rows if r["id"] == other_job]
        assert batch.ack([(rest, Ack.default())]).acked == 1
    assert stops == []
    assert counts.acked == 1
    assert not env.exists(slow_job)
    env.sql.execute(f"SELECT amount FROM `{accounts}` WHERE id = 1")
    assert env.sql.fetchone() == (1,)


def test_a_transactional_task_is_not_called_once_its_lease_may_have_run_out(env: JobsEnv) -> None:
    job_id = env.enqueuer.enqueue("record", "late")
    store = env.store()
    store._leases._stop = lambda code: None  # the watchdog's exit, not taken: the test asks the ack
    calls: list[int] = []
    (entry,) = store.claim_due(10)
    with store.started([entry]) as batch:
        assert batch.hold is not None
        batch.hold.confirmed -= 60  # the worker was stopped for a minute since its last renewal
        counts = batch.ack([(batch.rows[0], Ack("transaction", work=lambda cur: calls.append(1)))])
    assert calls == []
    assert (counts.acked, counts.stale) == (0, 1)
    assert env.run_of(job_id, "dc_state") == (State.RUNNING,)  # left to come back by its lease


def test_a_worker_calls_a_transactional_task_once_when_its_ack_meets_a_lock_wait(
    env: JobsEnv, mysql_settings: MySQLSettings
) -> None:
    """The whole worker (its acker hands a failed ack back and tries again): still one call."""
    env = JobsEnv(
        env.settings.model_copy(update={"mysql": env.settings.mysql.model_copy(update={"lock_wait_s": 1})}),
        env.sql,
    )
    table = f"acct_{uuid.uuid4().hex[:8]}"
    env.sql.execute(f"CREATE TABLE `{table}` (id INT AUTO_INCREMENT PRIMARY KEY, account INT, amount INT)")
    job_id = env.enqueuer.enqueue("credit", {"table": table, "account": 1, "amount": 10})
    # REPEATABLE READ (not duecast's READ COMMITTED): its locking read takes the gaps, so the task's
    # INSERT waits for this session until the lock wait runs out (1205).
    holder = pymysql.connect(
        host=mysql_settings.host,
        port=mysql_settings.port,
        user=mysql_settings.user,
        password=mysql_settings.password.get_secret_value(),
        database=mysql_settings.database,
    )
    release = threading.Timer(6.0, holder.rollback)  # long after one ack and its retries
    try:
        with holder.cursor() as cur:
            cur.execute("BEGIN")
            cur.execute(f"SELECT * FROM `{table}` WHERE id >= 0 FOR UPDATE")
        release.start()
        env.run_once()
    finally:
        release.cancel()
        release.join()
        holder.rollback()
        holder.close()
    calls = [p for p in payloads() if isinstance(p, dict) and p.get("table") == table]
    assert calls == [{"table": table, "account": 1, "amount": 10}]
    state, errors = env.job(job_id, "dc_state", "errors")
    assert (state, errors) == (State.IDLE, 1)  # the attempt failed; a new one runs it after its backoff
    env.sql.execute(f"SELECT COUNT(*) FROM `{table}`")
    assert env.sql.fetchone() == (0,)
    env.sql.execute(f"DROP TABLE `{table}`")
