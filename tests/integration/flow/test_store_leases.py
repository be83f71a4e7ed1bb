"""SourceStore on real MariaDB while checks run: no lock held, leases renewed, acks and failures each
committed on their own (any subset, any order), failures by kind of source, refused values, and a
start whose commit came too late."""

from __future__ import annotations

import pytest

from duecast.shared.acks import Ack
from duecast.shared.entries import Entry
from duecast.shared.storage.db import Database
from duecast.shared.storage.source_store import AckCounts, SourceStore
from tests.integration.flow.store_helpers import (
    DISPATCHED,
    IDLE,
    RUNNING,
    MakeEnv,
    at_slot,
    due_times,
    entries,
)
from tests.integration.polling import wait_until

pytestmark = pytest.mark.integration


def test_acks_and_failures_commit_on_their_own_in_any_subset_while_the_batch_runs(make_env: MakeEnv) -> None:
    env = make_env("rescan", rows=4)
    env.store.claim_due(4)
    with env.store.started(entries([1, 2, 3, 4])) as batch:
        rows = {r["user_id"]: r for r in batch.rows}
        assert batch.ack([(rows[3], Ack.touch(status=3))]) == AckCounts(1, 0)
        assert env.states() == {1: (RUNNING, 1), 2: (RUNNING, 1), 3: (IDLE, 1), 4: (RUNNING, 1)}
        batch.fail([(rows[1], RuntimeError("boom"))])
        assert env.states()[1] == (IDLE, 1)
        assert batch.ack([(rows[4], Ack.default()), (rows[2], Ack.default())]) == AckCounts(2, 0)
        assert batch.ack([(rows[4], Ack.default())]) == AckCounts(0, 1)  # finished already
        assert batch.settle() == AckCounts(0, 0)  # row mode: nothing waits on time
    assert env.states() == {i: (IDLE, 1) for i in range(1, 5)}
    assert dict(env.query("SELECT {pk}, status FROM {t}")) == {1: 1, 2: 1, 3: 3, 4: 1}


def test_a_failed_rescan_row_is_checked_again_at_its_next_period(make_env: MakeEnv) -> None:
    env = make_env("rescan", rows=2, period_s=10)
    env.store.claim_due(2)
    t0 = env.db_now()
    with env.store.started(entries([1, 2])) as batch:
        batch.fail([(batch.rows[0], RuntimeError("the check failed"))])
    t1 = env.db_now()

    assert env.states() == {1: (IDLE, 1), 2: (RUNNING, 1)}
    assert at_slot(due_times(env)[1], t0, t1, 1, 10)  # as if checked now: its slot
    with env.store.started(entries([1])) as copy:  # a copy of its entry: the attempt is over
        assert copy.rows == []
    env.query("UPDATE {t} SET updated_time = NOW(6) WHERE {pk} = 1")  # the slot as now: due in 10 s
    assert env.store.claim_due(10) == []
    env.query("UPDATE {t} SET updated_time = updated_time - INTERVAL 10 SECOND WHERE {pk} = 1")
    assert env.store.claim_due(10) == [Entry(1, 2)]


def test_a_failed_one_off_row_is_left_to_the_sweeper_under_a_new_attempt(make_env: MakeEnv) -> None:
    env = make_env("oneoff", rows=2)
    env.store.claim_due(2)
    with env.store.started(entries([1, 2])) as batch:
        batch.fail([(batch.rows[0], RuntimeError("the task failed"))])
        assert env.count("id = 1 AND dc_dispatched_at >= NOW(6) - INTERVAL 5 SECOND") == 1

    assert env.states() == {1: (DISPATCHED, 2), 2: (RUNNING, 1)}
    with env.store.started(entries([1])) as copy:  # no copy of its entry can run it again
        assert copy.rows == []
    assert env.store.requeue_expired(60, 100) == 0  # its retry delay is the visibility timeout
    env.backdate_dispatch(61, where="id = 1")
    assert env.store.requeue_expired(60, 100) == 1
    assert env.store.claim_due(10) == [Entry(1, 3)]


@pytest.mark.parametrize(
    ("kind", "bad"), [("rescan", Ack.touch(status="x")), ("oneoff", Ack.touch(payload="p" * 65))]
)
def test_a_value_the_database_refuses_fails_that_row_alone(make_env: MakeEnv, kind: str, bad: Ack) -> None:
    env = make_env(kind, rows=3)
    env.store.claim_due(3)
    with env.store.started(entries([1, 2, 3])) as batch:
        counts = batch.ack([(batch.rows[0], Ack.touch()), (batch.rows[1], bad), (batch.rows[2], Ack.touch())])

    assert counts == AckCounts(acked=2, stale=0, refused=1)
    failed = (IDLE, 1) if kind == "rescan" else (DISPATCHED, 2)  # as a failure of its kind
    assert env.states() == {1: (IDLE, 1), 2: failed, 3: (IDLE, 1)}


def test_the_keeper_renews_the_leases_of_a_batch_while_it_runs(make_env: MakeEnv) -> None:
    env = make_env("rescan", rows=1)
    (entry,) = env.store.claim_due(1)
    # A lease of 6 s (renewed every 2 s); the keeper's connection gives up on a stall after 1 s.
    src = env.source.model_copy(update={"lease_s": 6.0})
    store = SourceStore(Database(env.settings.mysql.model_copy(update={"lease_keeper_timeout_s": 1.0})), src)
    store.verify()
    batch = store.start([entry])
    try:
        env.backdate_dispatch(4, where="dc_state = 2")  # 4 s of its 6 s lease seem gone already
        (aged,) = env.query("SELECT dc_dispatched_at FROM {t}")[0]

        def renewed() -> bool:
            return bool(env.query("SELECT dc_dispatched_at > %s FROM {t}", (aged,))[0][0])

        wait_until(renewed, "the keeper to renew the lease")
        env.backdate_dispatch(5, where="dc_state = 2")  # renewed, it is still within its lease
        assert store.requeue_interrupted(100) == 0
        assert batch.ack([(batch.rows[0], Ack.default())]) == AckCounts(1, 0)
    finally:
        batch.close()
        store.db.close()
    assert env.states() == {1: (IDLE, 1)}


def test_a_start_whose_commit_came_too_late_runs_nothing_and_gives_the_rows_back(
    make_env: MakeEnv, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = make_env("rescan", rows=2)
    env.store.claim_due(2)
    due_before = due_times(env)
    # The commit stalled past the leases' first renewal (keeper.in_time): they may run out first.
    monkeypatch.setattr(env.store._leases, "in_time", lambda since: False)

    with env.store.started(entries([1, 2])) as batch:
        assert (batch.rows, batch.skipped) == ([], 2)

    assert env.states() == {1: (IDLE, 1), 2: (IDLE, 1)}  # due again now, as they were
    assert due_times(env) == due_before
    assert env.store.claim_due(10) == entries([1, 2], attempt=2)


def test_leases_and_requeues_read_the_database_clock(make_env: MakeEnv) -> None:
    """A lease is its last renewal (dc_dispatched_at) plus lease_s on NOW(6): 1 s short of the lease
    it is kept, 1 s past it it is interrupted."""
    env = make_env("rescan", rows=2, lease_s=20)
    env.store.claim_due(2)
    env.store.start(entries([1, 2])).close()
    env.query("UPDATE {t} SET dc_dispatched_at = NOW(6) - INTERVAL ELT({pk}, 19, 21) SECOND")
    assert env.store.requeue_interrupted(100) == 1
    assert env.states() == {1: (RUNNING, 1), 2: (IDLE, 1)}
