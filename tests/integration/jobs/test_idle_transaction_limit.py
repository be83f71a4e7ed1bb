"""A worker stopped (SIGSTOP) inside an open transaction holds duecast's rows no longer than its
sessions' idle-transaction limit (worker.idle_transaction_s, about a lease): MariaDB ends the session,
its locks go, and the sweeper takes the run back (issue 24, item 1)."""

from __future__ import annotations

import time

import pymysql
import pytest

from duecast.shared.policy import idle_transaction_limit_s
from duecast.shared.settings import MySQLSettings
from duecast.shared.states import State
from duecast.shared.storage.db import Database, connect
from duecast.shared.storage.units import TransientError
from tests.integration.jobs.jobs_env import JobsEnv
from tests.integration.polling import wait_until

pytestmark = pytest.mark.integration

LIMIT_S = 1


def test_a_stopped_workers_idle_transaction_is_ended_and_its_run_comes_back(
    env: JobsEnv, mysql_settings: MySQLSettings
) -> None:
    store = env.store()
    job_id = env.enqueuer.enqueue("record", "x")
    (entry,) = store.claim_due(10)
    with store.started([entry]):
        pass  # its handler ran; the ack below never commits
    env.expire_leases()  # and the stop outlasts the lease
    (run,) = env.runs("id")
    stopped = connect(mysql_settings, idle_transaction_s=LIMIT_S)  # a worker session, as it opens them
    try:
        with stopped.cursor() as cur:  # its ack locked the run, then the process was stopped
            cur.execute(f"SELECT id FROM `{env.settings.jobs.runs_table}` WHERE id = %s FOR UPDATE", run)
        began = time.monotonic()

        def taken_back() -> bool:
            try:
                return store.requeue_expired(60, 100) == 1
            except TransientError:  # the lock is still held: the sweeper's lock wait ran out
                return False

        wait_until(taken_back, "the sweeper to take the stopped worker's run back", timeout_s=15)
        assert time.monotonic() - began < LIMIT_S + 2 * mysql_settings.lock_wait_s + 1
        with pytest.raises(pymysql.err.OperationalError):  # the server ended the stopped session
            stopped.ping(reconnect=False)
    finally:
        stopped.close()
    assert env.job(job_id, "dc_state", "interruptions") == (State.IDLE, 1)


def test_only_the_sessions_given_a_limit_have_it(mysql_settings: MySQLSettings) -> None:
    for limit in (5, 0):  # a worker's stores; an enqueuer's or a caller's connection
        db = Database(mysql_settings, idle_transaction_s=limit)
        with db.transaction() as cur:
            cur.execute("SELECT @@session.idle_transaction_timeout")
            assert cur.fetchone() == (limit,)
        db.close()


def test_the_limit_defaults_to_the_longest_lease_served() -> None:
    assert idle_transaction_limit_s(None, [15.0, 20.5]) == 21
    assert idle_transaction_limit_s(0, [15.0]) == 0  # off
    assert idle_transaction_limit_s(7, [15.0]) == 7
