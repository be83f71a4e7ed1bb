"""SourceStore state transitions on real MariaDB: claim, start, fenced acks, status. Leases, failures and
requeues by cause are in test_store_leases.py."""

from __future__ import annotations

import datetime as dt
import threading

import pytest

from duecast.shared.acks import Ack
from duecast.shared.entries import Entry
from duecast.shared.storage.source_store import AckCounts, SourceStatus, SourceStore
from tests.integration.flow.store_helpers import (
    DISPATCHED,
    IDLE,
    RUNNING,
    MakeEnv,
    at_slot,
    due_times,
    entries,
)

pytestmark = pytest.mark.integration


# ---------------------------------------------------------------- claim_due


def test_claim_due_returns_oldest_due_first_with_ties_broken_by_id(make_env: MakeEnv) -> None:
    env = make_env("rescan", rows=10)
    # Offsets in seconds from a fixed past instant, per user_id 1..10; ids 2 and 3 tie.
    env.query(
        "UPDATE {t} SET updated_time = TIMESTAMP('2020-01-01') "
        "+ INTERVAL ELT({pk}, 50, 30, 30, 10, 40, 20, 60, 70, 80, 90) SECOND"
    )
    env.query("UPDATE {t} SET updated_time = NOW(6) WHERE {pk} IN (9, 10)")  # checked just now
    before = env.db_now()

    first = env.store.claim_due(3)
    rest = env.store.claim_due(100)
    after = env.db_now()

    assert first == entries([4, 6, 2])
    assert rest == entries([3, 5, 1, 7, 8])
    assert env.store.claim_due(100) == []
    assert env.states() == {**{i: (DISPATCHED, 1) for i in range(1, 9)}, 9: (IDLE, 0), 10: (IDLE, 0)}
    for (dispatched_at,) in env.query("SELECT dc_dispatched_at FROM {t} WHERE dc_state = 1"):
        assert before <= dispatched_at <= after


def test_claim_due_respects_the_period_on_the_database_clock(make_env: MakeEnv) -> None:
    env = make_env("rescan", rows=3, period_s=10)
    env.query(
        "UPDATE {t} SET updated_time = NOW(6) - INTERVAL ELT({pk}, 5, 11, 0) SECOND"
    )  # 1: checked 5 s ago, 2: 11 s ago, 3: just now

    assert env.store.claim_due(10) == [Entry(2, 1)]
    assert env.store.claim_due(10) == []

    env.query("UPDATE {t} SET updated_time = updated_time - INTERVAL 1 HOUR WHERE {pk} IN (1, 3)")
    assert env.store.claim_due(10) == entries([1, 3])
    assert env.states() == {1: (DISPATCHED, 1), 2: (DISPATCHED, 1), 3: (DISPATCHED, 1)}


def test_a_reclaimed_row_gets_the_next_attempt(make_env: MakeEnv) -> None:
    env = make_env("oneoff", rows=2)
    assert env.store.claim_due(10) == entries([1, 2])
    env.backdate_dispatch()
    assert env.store.requeue_expired(60, 100) == 2

    assert env.store.claim_due(10) == entries([1, 2], attempt=2)
    assert env.states() == {1: (DISPATCHED, 2), 2: (DISPATCHED, 2)}


def test_two_claimers_in_parallel_never_claim_the_same_row(make_env: MakeEnv) -> None:
    env = make_env("rescan", rows=3000)
    stores = [env.store, env.other_store()]
    claimed: list[list[Entry]] = [[], []]
    errors: list[BaseException] = []
    start = threading.Barrier(2)

    def claim_all(store: SourceStore, into: list[Entry]) -> None:
        try:
            start.wait(5)
            while batch := store.claim_due(37):
                into.extend(batch)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=claim_all, args=(s, c)) for s, c in zip(stores, claimed, strict=True)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)

    assert errors == []
    a, b = (set(c) for c in claimed)
    assert len(a) == len(claimed[0])  # no entry twice within one claimer either
    assert len(b) == len(claimed[1])
    assert a.isdisjoint(b)
    assert a | b == set(entries(list(range(1, 3001))))
    assert env.count("dc_state = 1 AND dc_attempt = 1") == 3000


# ---------------------------------------------------------------- started


def test_start_takes_only_rows_whose_attempt_still_matches_and_commits_them_running(
    make_env: MakeEnv,
) -> None:
    env = make_env("rescan", rows=6)
    assert env.store.claim_due(5) == entries([1, 2, 3, 4, 5])
    env.query("UPDATE {t} SET dc_attempt = 1 WHERE {pk} = 6")  # IDLE, but with attempt 1
    asked = [Entry(1, 1), Entry(2, 2), Entry(3, 1), Entry(4, 0), Entry(6, 1), Entry(99_999, 1), Entry(5, 1)]
    before = env.db_now()

    with env.store.started(asked, ["status"]) as batch:
        assert sorted(r["user_id"] for r in batch.rows) == [1, 3, 5]
        assert all(set(r) == {"user_id", "dc_attempt", "status"} for r in batch.rows)
        assert batch.skipped == 4
        # Committed before any handler runs: another session sees them started, and locks none.
        assert env.states() == {
            **{i: (RUNNING, 1) for i in (1, 3, 5)},
            2: (DISPATCHED, 1),
            4: (DISPATCHED, 1),
            6: (IDLE, 1),
        }
        assert len(env.query("SELECT {pk} FROM {t} WHERE {pk} IN (1, 3, 5) FOR UPDATE NOWAIT")) == 3
    with env.store.started(entries([2])) as batch:
        assert set(batch.rows[0]) == {
            "user_id",
            "status",
            "updated_time",
            "dc_state",
            "dc_attempt",
            "dc_dispatched_at",
        }
    after = env.db_now()

    # No ack: the rows stay started, each with its lease from its start.
    assert env.states() == {**{i: (RUNNING, 1) for i in (1, 2, 3, 5)}, 4: (DISPATCHED, 1), 6: (IDLE, 1)}
    for (leased_at,) in env.query("SELECT dc_dispatched_at FROM {t} WHERE dc_state = 2"):
        assert before <= leased_at <= after


def test_started_refuses_an_empty_batch(make_env: MakeEnv) -> None:
    env = make_env("rescan")
    with pytest.raises(ValueError, match="at least one entry"), env.store.started([]):
        pass


# ---------------------------------------------------------------- acks


def test_touch_acks_set_idle_and_due_from_their_slot_on_the_database_clock(make_env: MakeEnv) -> None:
    env = make_env("rescan", rows=5)
    env.store.claim_due(10)
    t0 = env.db_now()

    with env.store.started(entries([1, 2, 3, 4])) as batch:
        rows = {r["user_id"]: r for r in batch.rows}
        counts = batch.ack(
            [
                (rows[1], Ack.default()),
                (rows[2], Ack.touch()),
                (rows[3], Ack.touch(status=7)),
                (rows[4], Ack.touch(delay_s=30)),
            ]
        )
    t1 = env.db_now()

    assert counts == AckCounts(acked=4, stale=0)
    assert env.states() == {**{i: (IDLE, 1) for i in range(1, 5)}, 5: (DISPATCHED, 1)}
    due = due_times(env)
    for i in (1, 2, 3):  # the slot the check served: due again a period after it (shared.queries.pace)
        assert at_slot(due[i], t0, t1, i, env.source.period_s)
    assert at_slot(due[4] - dt.timedelta(seconds=30), t0, t1, 4, env.source.period_s)
    assert dict(env.query("SELECT {pk}, status FROM {t}")) == {1: 1, 2: 1, 3: 7, 4: 1, 5: 1}

    # Due again one period (10 s) after it, row 4 only after its extra 30 s. (As if the slots were
    # now: a slot is up to a period before the check, so the next may come within milliseconds.)
    env.query("UPDATE {t} SET updated_time = NOW(6) WHERE {pk} IN (1, 2, 3)")
    env.query("UPDATE {t} SET updated_time = NOW(6) + INTERVAL 30 SECOND WHERE {pk} = 4")
    assert env.store.claim_due(10) == []
    env.query("UPDATE {t} SET updated_time = updated_time - INTERVAL 11 SECOND WHERE dc_state = 0")
    assert env.store.claim_due(10) == entries([1, 2, 3], attempt=2)
    env.query("UPDATE {t} SET updated_time = updated_time - INTERVAL 30 SECOND WHERE {pk} = 4")
    assert env.store.claim_due(10) == [Entry(4, 2)]


def test_delete_acks_remove_rows_and_touch_reschedules_a_one_off_row(make_env: MakeEnv) -> None:
    env = make_env("oneoff", rows=5)
    env.store.claim_due(10)
    t0 = env.db_now()

    with env.store.started(entries([1, 2, 3, 4, 5])) as batch:
        rows = {r["id"]: r for r in batch.rows}
        counts = batch.ack(
            [
                (rows[1], Ack.default()),
                (rows[2], Ack.delete()),
                (rows[3], Ack.default()),
                (rows[4], Ack.touch(delay_s=60, payload="again")),
            ]
        )
    t1 = env.db_now()

    assert counts == AckCounts(acked=4, stale=0)
    assert env.states() == {4: (IDLE, 1), 5: (RUNNING, 1)}  # 5 started, never acked
    ((due_at, payload),) = env.query("SELECT due_at, payload FROM {t} WHERE id = 4")
    assert payload == "again"
    assert t0 + dt.timedelta(seconds=60) <= due_at <= t1 + dt.timedelta(seconds=60)


def test_ack_with_a_column_the_table_lacks_is_refused_before_any_sql(make_env: MakeEnv) -> None:
    env = make_env("rescan", rows=1)
    env.store.claim_due(1)
    with env.store.started(entries([1])) as batch, pytest.raises(ValueError, match="not a column"):
        batch.ack([(batch.rows[0], Ack.touch(no_such_column=1))])
    assert env.states() == {1: (RUNNING, 1)}


@pytest.mark.parametrize("kind", ["rescan", "oneoff"])
def test_a_stale_ack_changes_nothing_and_is_counted(make_env: MakeEnv, kind: str) -> None:
    env = make_env(kind, rows=2)
    assert env.store.claim_due(10) == entries([1, 2])
    with env.store.started(entries([1])) as slow:
        (old_row,) = slow.rows  # what a slow worker holds for attempt 1
    env.backdate_dispatch(where="dc_state IN (1, 2)")
    assert env.store.requeue_expired(60, 100) == 1  # 2: never started
    assert env.store.requeue_interrupted(100) == 1  # 1: its lease ran out
    assert env.store.claim_due(10) == entries([1, 2], attempt=2)
    due_before = due_times(env)

    with env.store.started(entries([1])) as batch:
        assert batch.rows == []  # the old entry no longer starts anything
    with env.store.db.transaction() as cur:
        assert env.store.run_ack(cur, env.store.group_key(Ack.default()), [old_row]) == 0
    assert slow.ack([(old_row, Ack.default())]) == AckCounts(acked=0, stale=1)
    slow.fail([(old_row, RuntimeError("late"))])  # a late failure changes nothing either
    with env.store.started([Entry(2, 2)]) as batch:
        counts = batch.ack([(old_row, Ack.default()), (batch.rows[0], Ack.default())])

    assert counts == AckCounts(acked=1, stale=1)
    assert env.states()[1] == (DISPATCHED, 2)
    assert due_times(env)[1] == due_before[1]
    assert env.states().get(2) == (None if kind == "oneoff" else (IDLE, 2))


# ---------------------------------------------------------------- status


def test_status_counts_due_in_flight_and_the_oldest_due_age(make_env: MakeEnv) -> None:
    env = make_env("rescan", rows=5, period_s=10)
    assert env.store.status().due == 5
    env.query("UPDATE {t} SET updated_time = NOW(6) - INTERVAL ELT({pk}, 7200, 3600, 1800, 5, 0) SECOND")
    assert env.store.claim_due(2) == [Entry(1, 1), Entry(2, 1)]
    env.store.start([Entry(1, 1)]).close()  # started, never finished: RUNNING

    status = env.store.status()

    assert status.due == 1  # id 3; 4 and 5 were checked within the period
    assert status.in_flight == 2  # 1 started, 2 dispatched
    # Row 1 (started) has been due the longest: checked 7200 s ago, due since 7190 s.
    assert status.oldest_due_age_s is not None
    assert 7190 <= status.oldest_due_age_s < 7190 + 5


def test_status_of_an_empty_source(make_env: MakeEnv) -> None:
    env = make_env("oneoff")
    assert env.store.status() == SourceStatus(due=0, in_flight=0, oldest_due_age_s=None)
