"""SourceStore sweeps and locks on real MariaDB: requeue_expired and requeue_interrupted, reset,
duplicate entries, and rows an application holds locked."""

from __future__ import annotations

import dataclasses
import time

import pymysql
import pytest

from duecast.shared.acks import Ack
from duecast.shared.storage.source_store import AckCounts
from tests.integration.flow.store_helpers import DISPATCHED, IDLE, RUNNING, MakeEnv, due_times, entries

pytestmark = pytest.mark.integration


# ---------------------------------------------------------------- requeue_expired


def test_requeue_expired_takes_only_rows_past_the_visibility_timeout(make_env: MakeEnv) -> None:
    env = make_env("rescan", rows=10)
    env.store.claim_due(10)
    env.backdate_dispatch(3600, where="user_id <= 5")
    env.backdate_dispatch(30, where="user_id = 6")  # dispatched 30 s ago: within the 60 s timeout
    due_before = due_times(env)

    assert env.store.requeue_expired(60, 3) == 3
    assert env.store.requeue_expired(60, 100) == 2
    assert env.store.requeue_expired(60, 100) == 0

    assert env.states() == {
        **{i: (IDLE, 1) for i in range(1, 6)},
        **{i: (DISPATCHED, 1) for i in range(6, 11)},
    }
    assert due_times(env) == due_before  # due unchanged: the requeued rows are due at once
    assert env.store.claim_due(100) == entries([1, 2, 3, 4, 5], attempt=2)


def test_a_live_batch_is_never_requeued_and_a_dead_ones_rows_come_back_after_their_lease(
    make_env: MakeEnv,
) -> None:
    env = make_env("rescan", rows=4)
    env.store.claim_due(4)
    env.backdate_dispatch()
    worker = env.other_store()

    batch = worker.start(entries([1, 2]))
    try:
        assert len(batch.rows) == 2
        assert env.store.requeue_expired(60, 100) == 2  # 3 and 4: dispatched long ago, never started
        assert env.store.requeue_interrupted(100) == 0  # 1 and 2: leased, from their start
        assert env.states() == {1: (RUNNING, 1), 2: (RUNNING, 1), 3: (IDLE, 1), 4: (IDLE, 1)}
    finally:
        batch.close()  # the worker dies: nobody renews its leases any more
    worker.db.close()
    env.backdate_dispatch(env.source.lease_s - 1, where="dc_state = 2")
    assert env.store.requeue_interrupted(100) == 0  # within the lease still
    env.backdate_dispatch(2, where="dc_state = 2")
    assert env.store.requeue_interrupted(100) == 2
    assert env.states() == {i: (IDLE, 1) for i in range(1, 5)}  # attempt untouched: the claim bumps it
    assert env.store.claim_due(10) == entries([1, 2, 3, 4], attempt=2)


def test_reset_dispatched_releases_every_row_in_flight(make_env: MakeEnv) -> None:
    env = make_env("oneoff", rows=5)
    env.store.claim_due(3)
    env.store.start(entries([1])).close()
    assert env.store.reset_dispatched() == 3
    assert env.states() == {i: (IDLE, 1 if i <= 3 else 0) for i in range(1, 6)}


# ---------------------------------------------------------------- duplicate entries


def test_a_copy_of_an_entry_started_elsewhere_starts_nothing_and_waits_for_nobody(make_env: MakeEnv) -> None:
    env = make_env("rescan", rows=1)
    (entry,) = env.store.claim_due(1)
    # lock_wait_s=60: a copy that waited for any lock would take far longer than this test allows.
    second = env.other_store(lock_wait_s=60)

    with env.store.started([entry]) as batch:  # its handler runs now: no transaction is open
        assert len(batch.rows) == 1
        began = time.monotonic()
        with second.started([entry]) as copy:
            assert (copy.rows, copy.skipped, copy.skipped_locked) == ([], 1, 0)
        assert time.monotonic() - began < 1.0
        assert batch.ack([(batch.rows[0], Ack.default())]) == AckCounts(1, 0)
    with second.started([entry]) as copy:  # and after the ack: still nothing
        assert copy.rows == []

    assert env.states() == {1: (IDLE, 1)}


# ---------------------------------------------------------------- an application's locks


def test_after_the_lock_wait_a_start_skips_rows_an_application_holds(
    make_env: MakeEnv, holder: pymysql.cursors.Cursor
) -> None:
    env = make_env("rescan", rows=2)
    env.store.claim_due(2)
    impatient = env.other_store(lock_wait_s=1)
    holder.execute(f"SELECT user_id FROM `{env.table}` WHERE user_id = 1 FOR UPDATE")

    with impatient.started(entries([1, 2])) as batch:
        assert [r["user_id"] for r in batch.rows] == [2]
        assert (batch.skipped, batch.skipped_locked) == (1, 1)
        assert batch.ack([(batch.rows[0], Ack.default())]) == AckCounts(1, 0)
    holder.connection.rollback()
    with impatient.started(entries([1])) as batch:  # the application let go: row 1 starts now
        assert batch.ack([(batch.rows[0], Ack.default())]) == AckCounts(1, 0)

    assert env.states() == {1: (IDLE, 1), 2: (IDLE, 1)}


@pytest.mark.parametrize("n", [999, 2000])
def test_a_large_batch_does_not_wait_for_rows_it_never_asked_for(
    make_env: MakeEnv, holder: pymysql.cursors.Cursor, n: int
) -> None:
    env = make_env("rescan", rows=3000)
    env.store.claim_due(3000)
    other = env.other_store(lock_wait_s=1)
    # Make the lock-wait fallback visible: here it finds nothing, so the batch gets its rows only
    # if its first locking read never waited.
    skip = other.sql.lock_dispatched_skip
    other.sql = dataclasses.replace(
        other.sql, lock_dispatched_skip=skip.replace(" WHERE ", " WHERE 1 = 0 AND ", 1)
    )
    holder.execute(f"SELECT user_id FROM `{env.table}` WHERE user_id <= 5 FOR UPDATE")

    with other.started(entries(list(range(6, 6 + n)))) as batch:
        assert len(batch.rows) == n, "the batch waited for rows it never asked for"
