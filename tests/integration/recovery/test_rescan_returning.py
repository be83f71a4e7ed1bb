"""Re-scan rows coming back (issue 24, items 4 and 6), on real MariaDB and Redis: a row whose lease
ran out is pushed ahead of a backlog of 10,000 entries, while a row due again by its period is not;
and the supervisor's requeue of what an exited worker started is fenced on (id, attempt) and
RUNNING, so what it acked stays acked and its late ack never lands."""

from __future__ import annotations

import pymysql
import pytest

from duecast.dispatcher.dispatcher import Dispatcher
from duecast.dispatcher.redelivery import Redelivery
from duecast.shared.acks import Ack
from duecast.shared.entries import Entry
from duecast.shared.process.runtime import build_stores
from duecast.shared.queries.ranges import ranges_table
from duecast.shared.settings import MySQLSettings, RedisSettings, Settings
from duecast.shared.storage.admin import migrate
from duecast.shared.storage.protocol import StartsUnnamed
from duecast.shared.storage.range_store import RangeStore
from tests.integration import range_app
from tests.integration.conftest import Env
from tests.integration.flow.store_helpers import DISPATCHED, IDLE, RUNNING, MakeEnv

pytestmark = pytest.mark.integration

BACKLOG = 10_000


def dispatch_once(env: Env) -> None:
    """One tick of the real dispatcher (claim, then push_claimed)."""
    redelivery = Redelivery([], env.queue, {"lost": 1.0}, 100)
    Dispatcher([env.store], env.queue, env.settings.dispatcher, redelivery).tick()


def test_a_rescan_row_whose_lease_ran_out_is_popped_before_a_backlog_of_10000(make_env: MakeEnv) -> None:
    env = make_env("rescan", rows=20)
    name = env.source.name
    first = env.store.claim_due(5)
    assert env.store.returning == 0  # due by its period: new work
    env.store.start(first).close()  # started, then its worker died: nobody renews the leases
    assert env.backdate_dispatch(env.source.lease_s + 1, where="dc_state = 2") == 5
    assert env.store.requeue_interrupted(100) == 5

    env.queue.push(name, [Entry(10**9 + i, 1) for i in range(BACKLOG)])  # what they would wait behind
    dispatch_once(env)
    assert env.store.returning == 5
    popped = env.queue.pop([name], 5, 0.1)
    assert popped == (name, [b"%d:2" % e.id for e in first])
    # The 15 rows due by their period went to the tail, behind the backlog.
    assert env.queue.length(name) == BACKLOG + 15
    tail = env.queue.client.lrange(env.queue.keys.ready(name), -15, -1)
    assert tail == [b"%d:1" % i for i in range(6, 21)]


def test_a_row_checked_and_due_again_by_its_period_is_not_returning(make_env: MakeEnv) -> None:
    env = make_env("rescan", rows=3)
    entries = env.store.claim_due(10)
    batch = env.store.start(entries)
    assert batch.ack([(row, Ack.touch()) for row in batch.rows]).acked == 3
    batch.close()
    # An hour passes, in SQL: the due column and the last dispatch both move back.
    env.query(
        "UPDATE {t} SET updated_time = updated_time - INTERVAL 1 HOUR, "
        "dc_dispatched_at = dc_dispatched_at - INTERVAL 1 HOUR"
    )
    claimed = env.store.claim_due(10)  # in the order of their slots (the even pace)
    assert sorted(claimed, key=lambda e: e.id) == [Entry(i, 2) for i in (1, 2, 3)]
    assert env.store.returning == 0


def test_requeue_started_is_fenced_and_its_rows_come_back_first(make_env: MakeEnv) -> None:
    env = make_env("rescan", rows=4)
    assert isinstance(env.store, StartsUnnamed)
    started = env.store.claim_due(10)
    batch = env.store.start(started)
    rows = {int(r["user_id"]): r for r in batch.rows}
    assert batch.ack([(rows[1], Ack.touch())]).acked == 1  # acked before its worker exited
    # The supervisor, after the exit (the worker's started record names all four).
    assert env.store.requeue_started(started) == 3
    assert env.states() == {1: (IDLE, 1), 2: (IDLE, 1), 3: (IDLE, 1), 4: (IDLE, 1)}
    assert env.store.requeue_started(started) == 0  # idempotent: nothing RUNNING any more
    # Due at once (the due column untouched), and claimed as coming back; row 1 waits its period.
    assert env.store.claim_due(10) == [Entry(i, 2) for i in (2, 3, 4)]
    assert env.store.returning == 3
    assert env.store.requeue_started([Entry(2, 1)]) == 0  # DISPATCHED under attempt 2: untouched
    fresh = env.store.start([Entry(2, 2)])
    assert env.store.requeue_started([Entry(2, 1)]) == 0  # RUNNING, but under attempt 2
    assert env.states()[2] == (RUNNING, 2)
    # The dead attempt's late ack never lands.
    assert batch.ack([(rows[2], Ack.touch(status=9))]).acked == 0
    assert env.scalar("SELECT status FROM {t} WHERE user_id = 2") == 1
    fresh.close()
    batch.close()
    assert env.states()[3] == (DISPATCHED, 2)


def test_spans_coming_back_are_claimed_first_and_handed_back_fenced(
    mysql_settings: MySQLSettings, redis_settings: RedisSettings, sql: pymysql.cursors.Cursor
) -> None:
    """Range mode: the same on its ranges table (RangeStore.returning, requeue_started)."""
    src = range_app.users_source(sql, 500)  # spans 1-6 (ids 1-500, 100 per span)
    settings = Settings(mysql=mysql_settings, redis=redis_settings, sources=[src], jobs={"enabled": False})
    try:
        migrate.apply(settings)
        (store,) = build_stores(settings, [src])
        assert isinstance(store, RangeStore)
        assert isinstance(store, StartsUnnamed)
        store.discover(full=True)
        first = store.claim_due(2)
        assert store.returning == 0
        store.start(first).close()  # its worker died: nobody renews the spans' leases
        sql.execute(
            f"UPDATE `{ranges_table(src)}` SET dc_dispatched_at = dc_dispatched_at - INTERVAL 60 SECOND "
            "WHERE dc_state = 2"
        )
        assert store.requeue_interrupted(100) == 2
        again = store.claim_due(10)
        assert store.returning == 2
        assert again[:2] == [Entry(e.id, 2) for e in first]
        batch = store.start(again)
        assert store.requeue_started([Entry(e.id, 1) for e in again[:2]]) == 0  # their old attempt
        assert store.requeue_started(again) == len(again)  # handed back, as a supervisor does
        batch.close()
        assert store.claim_due(10) == [Entry(e.id, e.attempt + 1) for e in again]
        assert store.returning == len(again)
        store.close()
    finally:
        sql.execute(f"DROP TABLE IF EXISTS `{src.table}`, `{ranges_table(src)}`")
