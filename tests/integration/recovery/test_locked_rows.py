"""Issue 16.11: due rows a claim passes over because another session holds their lock (an
application's long transaction) are counted per source (`locked_skipped` in the Redis stats,
duecast_locked_skipped_total) and logged, in row mode and range mode; before, they went unchecked
in silence for as long as the lock was held.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator

import pymysql
import pytest

from duecast.dispatcher.dispatcher import Dispatcher
from duecast.dispatcher.redelivery import Redelivery
from duecast.shared.fanout.client import connect_redis
from duecast.shared.fanout.keys import Keys
from duecast.shared.fanout.queue import ReadyQueue
from duecast.shared.process.runtime import build_stores
from duecast.shared.queries.ranges import ranges_table
from duecast.shared.settings import DispatcherSettings, MySQLSettings, RedisSettings, Settings, WorkerSettings
from duecast.shared.states import State
from duecast.shared.storage.admin import migrate
from duecast.shared.storage.source_store import Store
from duecast.shared.telemetry import metrics
from duecast.worker import main as worker_main
from tests.integration import apps, range_app
from tests.integration.conftest import Env
from tests.integration.flow.roles_helpers import role_settings, work

pytestmark = pytest.mark.integration


HELD_S = 2.0  # mysql.lock_wait_s's default: a row passed over that long is reported


class Clock:
    """The dispatcher's clock for locks, moved by the test (no sleeping)."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def claimer(stores: list[Store], queue: ReadyQueue, clock: Clock | None = None) -> Dispatcher:
    """A dispatcher that only claims and pushes (its redelivery is not run here)."""
    settings = DispatcherSettings()
    redelivery = Redelivery(stores, queue, {"lost": 1.0}, settings.sweep_batch)
    dispatcher = Dispatcher(stores, queue, settings, redelivery, locked_held_s=HELD_S)
    dispatcher.locked.clock = clock or Clock()
    return dispatcher


def lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage() for r in caplog.records if getattr(r, "event", None) == "dispatcher.locked_skipped"
    ]


def metric(source: str) -> float:
    return metrics.COUNTERS["locked_skipped"].labels(source=source)._value.get()


def test_row_mode_counts_and_logs_rows_held_by_another_session(
    make_env: Callable[..., Env], holder: pymysql.cursors.Cursor, caplog: pytest.LogCaptureFixture
) -> None:
    env = make_env("rescan", rows=50)
    name = env.source.name
    holder.execute(f"SELECT user_id FROM `{env.table}` WHERE user_id <= 10 FOR UPDATE")
    clock = Clock()
    dispatcher = claimer([env.store], env.queue, clock)
    before = metric(name)
    with caplog.at_level(logging.WARNING, "duecast.dispatcher"):
        dispatcher.tick()  # claims the 40 free rows, passes over the 10 held: not yet for long
        assert "locked_skipped" not in env.queue.stats(name)
        clock.now = HELD_S
        dispatcher.tick()  # nothing free is due: the same 10 are passed over again, held 2 s
        clock.now += 1
        dispatcher.tick()
    assert env.queue.length(name) == 40
    assert env.queue.stats(name)["locked_skipped"] == 20
    assert metric(name) - before == 20
    found = lines(caplog)
    assert len(found) == 1, found  # at most one line per source every LOG_EVERY_S
    assert f"10 due rows of {name} held by another session's lock for over 2s" in found[0]
    holder.connection.rollback()  # the application's transaction ends
    dispatcher.tick()
    assert env.queue.length(name) == 50
    assert env.queue.stats(name)["locked_skipped"] == 20


def test_duecast_s_own_passing_locks_are_neither_counted_nor_logged(
    make_env: Callable[..., Env], holder: pymysql.cursors.Cursor, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 24.7 / 26.4: another dispatcher's claim (or an ack committing between a claim and its
    count) holds due rows for milliseconds; the next claim no longer meets them. Before, each such
    moment was logged as "held by another session's lock", every 30 s in normal operation."""
    env = make_env("rescan", rows=30)
    name = env.source.name
    clock = Clock()
    dispatcher = claimer([env.store], env.queue, clock)
    with caplog.at_level(logging.WARNING, "duecast.dispatcher"):
        # As another dispatcher's claim: rows 1-10 locked, then DISPATCHED and committed.
        holder.execute(f"SELECT user_id FROM `{env.table}` WHERE user_id <= 10 FOR UPDATE")
        dispatcher.tick()
        holder.execute(f"UPDATE `{env.table}` SET dc_state = 1 WHERE user_id <= 10")
        holder.connection.commit()
        # ...and again later, rows 11-20 by an ack committing rows due at once (all due again).
        env.sql.execute(f"UPDATE `{env.table}` SET dc_state = 0 WHERE user_id <= 20")
        holder.execute(f"SELECT user_id FROM `{env.table}` WHERE user_id BETWEEN 11 AND 20 FOR UPDATE")
        clock.now = 10 * HELD_S
        dispatcher.tick()
        holder.connection.rollback()
        clock.now += HELD_S
        dispatcher.tick()
    assert env.queue.length(name) == 40  # 20, then 10 (1-10 again), then 11-20
    assert "locked_skipped" not in env.queue.stats(name)
    assert lines(caplog) == []


def test_a_claim_with_nothing_held_counts_nothing(make_env: Callable[..., Env]) -> None:
    env = make_env("rescan", rows=30)
    claimer([env.store], env.queue).tick()
    assert env.queue.length(env.source.name) == 30
    assert "locked_skipped" not in env.queue.stats(env.source.name)


@pytest.fixture
def ranged(
    mysql_settings: MySQLSettings, redis_settings: RedisSettings, sql: pymysql.cursors.Cursor
) -> Iterator[Settings]:
    src = range_app.users_source(sql, 1000, claim_batch=300, high_water=3000)
    settings = Settings(
        mysql=mysql_settings,
        redis=redis_settings,
        sources=[src],
        jobs={"enabled": False},  # type: ignore[arg-type]
    )
    migrate.apply(settings)
    yield settings
    sql.execute(f"DROP TABLE IF EXISTS `{src.table}`")
    sql.execute(f"DROP TABLE IF EXISTS `{ranges_table(src)}`")


def test_range_mode_counts_ranges_held_by_another_session(
    ranged: Settings, holder: pymysql.cursors.Cursor, caplog: pytest.LogCaptureFixture
) -> None:
    (store,) = build_stores(ranged, ranged.sources)
    store.discover(full=True)  # type: ignore[attr-defined]
    src = ranged.sources[0]
    holder.execute(f"SELECT lo FROM `{ranges_table(src)}` WHERE lo < 300 FOR UPDATE")  # 3 spans of 100
    queue = ReadyQueue(connect_redis(ranged.redis), Keys(ranged.redis.key_prefix))
    clock = Clock()
    dispatcher = claimer([store], queue, clock)
    name = store.src.name
    with caplog.at_level(logging.WARNING, "duecast.dispatcher"):
        for _ in range(4):  # 3 ranges per claim (claim_batch 300 / range_size 100): 3, 3, 2, 0
            dispatcher.tick()
            clock.now += HELD_S
    assert queue.length(name) == 8  # spans 300-1000 (ids 1..1000: 11 spans, the first 3 held)
    # The short claims (2, then 0) saw all three; the second, 2 s after the first, reports them.
    assert queue.stats(name)["locked_skipped"] == 3
    found = lines(caplog)
    assert len(found) == 1, found
    assert "3 due ranges" in found[0]
    queue.client.close()


def test_a_worker_counts_dispatched_rows_held_by_another_session(
    make_env: Callable[..., Env],
    holder: pymysql.cursors.Cursor,
    recorder: apps.Recorder,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The worker's start waits mysql.lock_wait_s for a held row, then skips it: counted as locked,
    not as a stale entry, and logged."""
    env = make_env("rescan", rows=20, name=apps.RESCAN)
    settings = role_settings(env)
    claimer([env.store], env.queue).tick()
    holder.execute(f"SELECT user_id FROM `{env.table}` WHERE user_id <= 5 FOR UPDATE")
    with caplog.at_level(logging.WARNING, "duecast.worker"):
        work(settings)
    stats = env.queue.stats(apps.RESCAN)
    assert stats["locked_skipped"] == 5
    assert stats.get("stale_entries", 0) == 0
    assert sorted(recorder.executions(apps.RESCAN)) == list(range(6, 21))
    found = [r.getMessage() for r in caplog.records if getattr(r, "event", None) == "worker.locked_skipped"]
    assert len(found) == 1, found
    assert f"5 dispatched rows (or ranges) of {apps.RESCAN}" in found[0]


def test_a_range_worker_counts_ranges_held_by_another_session(
    ranged: Settings, holder: pymysql.cursors.Cursor
) -> None:
    settings = ranged.model_copy(
        update={"worker": WorkerSettings(app="tests.integration.range_app", block_timeout_s=0.1)}
    )
    (store,) = build_stores(settings, settings.sources)
    store.discover(full=True)  # type: ignore[attr-defined]
    queue = ReadyQueue(connect_redis(settings.redis), Keys(settings.redis.key_prefix))
    dispatcher = claimer([store], queue)
    for _ in range(4):
        dispatcher.tick()  # every span dispatched
    holder.execute(f"SELECT lo FROM `{ranges_table(settings.sources[0])}` WHERE lo < 200 FOR UPDATE")
    worker_main.serve(settings, threading.Event(), drain=True)
    stats = queue.stats(store.src.name)
    assert stats["locked_skipped"] == 2  # the two held spans, skipped after the lock wait
    assert stats.get("stale_entries", 0) == 0
    queue.client.close()


def test_a_one_off_sweep_takes_the_row_a_claim_held_past_its_due_rows(
    make_env: Callable[..., Env], holder: pymysql.cursors.Cursor
) -> None:
    """Found in CI (2026-11-28): `duecast sweeper --once` after a worker's SIGKILL left one of its
    rows RUNNING. A claim that finds fewer due rows than it asks for also locks, until it commits,
    the first dc_due record past them, here the head of the RUNNING prefix the sweep reads with
    SKIP LOCKED. The sweep's drain now takes a few passes a moment apart."""
    env = make_env("rescan", rows=10)
    env.sql.execute(
        f"UPDATE `{env.table}` SET dc_state = {State.RUNNING:d}, dc_attempt = 1, "
        "dc_dispatched_at = NOW(6) - INTERVAL 1 HOUR"
    )
    # The dispatcher's own claim statement, its transaction still open: nothing is due.
    period_us = round(env.source.period_s * 1e6)
    holder.execute(env.store.sql.claim_due, (period_us, period_us, 100))
    assert holder.fetchall() == ()
    sweep = Redelivery([env.store], env.queue, {"expired": 60.0, "interrupted": 60.0}, 1000)
    sweep.tick()  # one pass: the claim's lock hides the first row from it
    assert {i for i, (state, _) in env.states().items() if state == State.RUNNING} == {1}
    pauses: list[float] = []

    def pause(seconds: float) -> None:
        pauses.append(seconds)
        holder.connection.commit()  # the claim ends, as it does milliseconds later

    sweep.drain(sleep=pause)
    assert pauses
    assert env.count("dc_state = %s", (State.IDLE,)) == 10


def test_a_redis_loss_takes_the_row_a_claim_held_past_its_due_rows(
    make_env: Callable[..., Env], holder: pymysql.cursors.Cursor
) -> None:
    """The known bug of issue 24 (the fault tier, in the whole suite's order): after a Redis restart
    one one-off row of 300 waited for the visibility timeout. Redis lost its entries, and the "lost"
    requeue, which runs once per loss, passed over (SKIP LOCKED) the DISPATCHED row a claim held
    locked past its due rows. Its next runs now take what was dispatched before the loss was seen."""
    env = make_env("rescan", rows=10)
    env.sql.execute(
        f"UPDATE `{env.table}` SET dc_state = {State.DISPATCHED:d}, dc_attempt = 1, "
        "dc_dispatched_at = NOW(6) - INTERVAL 1 SECOND"
    )
    period_us = round(env.source.period_s * 1e6)
    holder.execute(env.store.sql.claim_due, (period_us, period_us, 100))  # open: nothing is due
    assert holder.fetchall() == ()
    clock = Clock()
    lost = Redelivery([env.store], env.queue, {"lost": 0.2}, 1000, clock=clock)
    env.queue.client.delete(env.queue.keys.epoch())  # Redis lost everything: the canary too
    lost.tick()
    assert {i for i, (state, _) in env.states().items() if state == State.DISPATCHED} == {1}
    holder.connection.commit()  # the claim ends, milliseconds later
    # A row dispatched after the loss was seen has its entry in Redis: it stays dispatched.
    env.sql.execute(
        f"UPDATE `{env.table}` SET dc_state = {State.DISPATCHED:d}, dc_dispatched_at = NOW(6) "
        "WHERE user_id = 2"
    )
    clock.now += 0.2  # the clock's 0.2 s: row 1 was dispatched 1 s before it, row 2 after
    lost.tick()  # the canary is back: a pass over what was dispatched before the loss only
    assert {i for i, (state, _) in env.states().items() if state == State.DISPATCHED} == {2}
    assert env.count("dc_state = %s", (State.IDLE,)) == 9
