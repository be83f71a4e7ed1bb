"""SourceStore sweeps and row locks on real MariaDB: requeue_expired, reset, and duplicate entries."""

from __future__ import annotations

import dataclasses
import threading
from typing import Any

import pytest

from duecast.shared.acks import Ack
from duecast.shared.storage.source_store import AckCounts
from duecast.shared.storage.units import TransientError
from tests.integration.flow.store_helpers import (
    DISPATCHED,
    IDLE,
    MakeEnv,
    due_times,
    entries,
    in_locking_read,
)
from tests.integration.polling import wait_until

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


def test_requeue_skips_rows_a_live_batch_holds_until_its_connection_dies(make_env: MakeEnv) -> None:
    env = make_env("rescan", rows=4)
    env.store.claim_due(4)
    env.backdate_dispatch()
    worker = env.other_store()

    held = worker.started(entries([1, 2]))
    batch = held.__enter__()
    assert len(batch.rows) == 2
    assert env.store.requeue_expired(60, 100) == 2
    assert env.states() == {1: (DISPATCHED, 1), 2: (DISPATCHED, 1), 3: (IDLE, 1), 4: (IDLE, 1)}
    worker.db.close()  # the worker dies mid-batch: no commit, its locks go with the connection
    with pytest.raises(TransientError):
        held.__exit__(None, None, None)  # its commit finds no connection

    requeued: list[int] = []
    wait_until(
        lambda: requeued.append(env.store.requeue_expired(60, 100)) or sum(requeued) == 2,
        "the dead worker's rows to be requeued",
    )
    assert env.states() == {i: (IDLE, 1) for i in range(1, 5)}


def test_reset_dispatched_releases_every_dispatched_row(make_env: MakeEnv) -> None:
    env = make_env("oneoff", rows=5)
    env.store.claim_due(3)
    assert env.store.reset_dispatched() == 3
    assert env.states() == {i: (IDLE, 1 if i <= 3 else 0) for i in range(1, 6)}


# ---------------------------------------------------------------- duplicate entries


def test_a_duplicate_entry_waits_for_the_holder_and_then_gets_no_rows(make_env: MakeEnv) -> None:
    env = make_env("rescan", rows=1)
    (entry,) = env.store.claim_due(1)
    # lock_wait_s=60: if the second batch returns inside this test, the holder's commit woke it.
    second = env.other_store(lock_wait_s=60)
    second_id = env.connection_id(second)
    got: list[Any] = []
    holder_committed = threading.Event()

    def duplicate() -> None:
        try:
            with second.started([entry]) as batch:
                got.append((holder_committed.is_set(), list(batch.rows)))
        except BaseException as exc:
            got.append(exc)

    with env.store.started([entry]) as batch:
        assert len(batch.rows) == 1
        thread = threading.Thread(target=duplicate)
        thread.start()
        wait_until(lambda: in_locking_read(env, second_id), "the duplicate to wait for the lock")
        assert batch.ack([(batch.rows[0], Ack.default())]) == AckCounts(1, 0)
        assert got == []
        holder_committed.set()
    thread.join(10)

    assert got == [(True, [])]
    assert env.states() == {1: (IDLE, 1)}


def test_after_the_lock_wait_a_batch_skips_held_rows_and_takes_the_free_ones(make_env: MakeEnv) -> None:
    env = make_env("rescan", rows=2)
    env.store.claim_due(2)
    impatient = env.other_store(lock_wait_s=1)

    with env.store.started(entries([1])) as held:
        with impatient.started(entries([1, 2])) as batch:
            assert [r["user_id"] for r in batch.rows] == [2]
            assert batch.ack([(batch.rows[0], Ack.default())]) == AckCounts(1, 0)
        assert held.ack([(held.rows[0], Ack.default())]) == AckCounts(1, 0)

    assert env.states() == {1: (IDLE, 1), 2: (IDLE, 1)}


@pytest.mark.parametrize(
    "n",
    [
        999,
        pytest.param(
            2000,
        ),
    ],
)
def test_a_large_batch_does_not_wait_for_rows_other_workers_hold(make_env: MakeEnv, n: int) -> None:
    env = make_env("rescan", rows=3000)
    env.store.claim_due(3000)
    other = env.other_store(lock_wait_s=1)
    # Make the lock-wait fallback visible: here it finds nothing, so the batch gets its rows only
    # if its first locking read never waited.
    skip = other.sql.lock_dispatched_skip
    other.sql = dataclasses.replace(
        other.sql, lock_dispatched_skip=skip.replace(" WHERE ", " WHERE 1 = 0 AND ", 1)
    )

    with env.store.started(entries([1, 2, 3, 4, 5])) as held:  # another worker's small batch
        assert len(held.rows) == 5
        with other.started(entries(list(range(6, 6 + n)))) as batch:
            assert len(batch.rows) == n, "the batch waited for rows it never asked for"
