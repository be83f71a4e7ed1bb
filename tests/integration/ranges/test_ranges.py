"""Range mode on real MariaDB + Redis: discovery, one pass checks every row once, only changed rows
are written, a failed row is checked again at its span's next period, and freshness is reported."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import pymysql
import pytest

from duecast.dispatcher.main import serve as serve_dispatcher
from duecast.shared.acks import Ack
from duecast.shared.pace import slot_us, spread_phase_us
from duecast.shared.process.runtime import build_stores
from duecast.shared.queries.pace import NOW_US, slot_sql
from duecast.shared.queries.ranges import ranges_table
from duecast.shared.settings import MySQLSettings, RedisSettings, Settings, SourceSettings
from duecast.shared.storage.admin import migrate
from duecast.shared.storage.range_store import RangeStore
from duecast.worker.main import serve as serve_worker
from tests.integration import range_app
from tests.integration.range_app import PLAN

pytestmark = pytest.mark.integration


@pytest.fixture
def ranged(
    mysql_settings: MySQLSettings, redis_settings: RedisSettings, sql: pymysql.cursors.Cursor
) -> Iterator[Callable[..., Settings]]:
    """ranged(n) -> settings for a range-mode source over a fresh table of users 1..n, migrated."""
    made: list[SourceSettings] = []

    def make(users: int, **overrides: Any) -> Settings:
        src = range_app.users_source(sql, users, claim_batch=300, high_water=3000, **overrides)
        made.append(src)
        settings = Settings(
            mysql=mysql_settings,
            redis=redis_settings,
            sources=[src],
            jobs={"enabled": False},  # type: ignore[arg-type]
            worker={"app": "tests.integration.range_app"},  # type: ignore[arg-type]
        )
        migrate.apply(settings)
        PLAN.reset()
        return settings

    yield make
    for src in made:
        sql.execute(f"DROP TABLE IF EXISTS `{src.table}`")
        sql.execute(f"DROP TABLE IF EXISTS `{ranges_table(src)}`")


def one_pass(settings: Settings) -> None:
    """Dispatcher (discovers ranges, claims all due) then a worker, both drained: the real loops."""
    serve_dispatcher(settings, threading.Event(), drain=True)
    serve_worker(settings, threading.Event(), drain=True)


def store(settings: Settings) -> RangeStore:
    (s,) = build_stores(settings, settings.sources)
    assert isinstance(s, RangeStore)
    return s


def checksum(sql: pymysql.cursors.Cursor, table: str) -> dict[int, tuple[int, str]]:
    sql.execute(f"SELECT user_id, status, CAST(updated_time AS CHAR) FROM `{table}`")
    return {r[0]: (r[1], r[2]) for r in sql.fetchall()}


def test_migrate_adds_only_a_ranges_table(
    ranged: Callable[..., Settings], sql: pymysql.cursors.Cursor
) -> None:
    settings = ranged(10)
    src = settings.sources[0]
    sql.execute(
        "SELECT COLUMN_NAME FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() "
        "AND TABLE_NAME = %s ORDER BY ORDINAL_POSITION",
        (src.table,),
    )
    assert [r[0] for r in sql.fetchall()] == ["user_id", "status", "updated_time"]
    assert migrate.plan(settings) == []  # idempotent


def test_discovery_covers_spans_with_rows_incrementally_and_fully(
    ranged: Callable[..., Settings], sql: pymysql.cursors.Cursor
) -> None:
    settings = ranged(250)  # spans [0,100) [100,200) [200,300) with range_size 100
    s = store(settings)
    rt = ranges_table(settings.sources[0])
    assert s.discover(full=True) == 3
    assert s.discover(full=True) == 0  # INSERT IGNORE: idempotent
    sql.execute(f"SELECT range_id, lo, hi FROM `{rt}` ORDER BY lo")
    assert sql.fetchall() == ((1, 0, 100), (2, 100, 200), (3, 200, 300))
    table = settings.sources[0].table
    sql.execute(f"INSERT INTO `{table}` VALUES (950, 1, NOW(6)), (10050, 1, NOW(6))")
    assert s.discover() == 2  # incremental: above the highest known span
    sql.execute(f"DELETE FROM `{rt}` WHERE lo = 100")  # a span the incremental pass cannot see
    assert s.discover() == 0
    assert s.discover(full=True) == 1


def test_one_pass_checks_every_row_once_and_writes_only_changes(
    ranged: Callable[..., Settings], sql: pymysql.cursors.Cursor
) -> None:
    settings = ranged(1000)
    table = settings.sources[0].table
    before = checksum(sql, table)
    PLAN.set_status.update({7: 2, 512: 2})

    one_pass(settings)

    assert PLAN.runs == {i: 1 for i in range(1, 1001)}
    after = checksum(sql, table)
    changed = {i for i in after if after[i] != before[i]}
    assert changed == {7, 512}
    assert after[7][0] == 2
    assert after[512][0] == 2
    sql.execute(
        f"SELECT COUNT(*), SUM(rows_seen), SUM(dc_state), MIN(checked_at > NOW(6) - INTERVAL 1 MINUTE) "
        f"FROM `{ranges_table(settings.sources[0])}`"
    )
    ranges, seen, dispatched, all_recent = sql.fetchone()
    assert (ranges, int(seen), int(dispatched), all_recent) == (11, 1000, 0, 1)
    sql.execute(f"SELECT {NOW_US}")
    before = int(sql.fetchone()[0])
    status = store(settings).status()
    sql.execute(f"SELECT {NOW_US}")
    after = int(sql.fetchone()[0])
    assert status.unit == "ranges"
    # Fresh: rows of spans whose check's slot (up to a period before it) is within period + 1 s.
    slot_us_sql = NOW_US.replace("NOW(6)", "`checked_at`")
    sql.execute(f"SELECT rows_seen, {slot_us_sql} FROM `{ranges_table(settings.sources[0])}`")
    slots = sql.fetchall()

    def fresh_at(now_us: int) -> float:
        return sum(int(n) for n, slot in slots if slot >= now_us - 11_000_000) / 1000

    assert status.fresh_share is not None
    assert fresh_at(after) <= status.fresh_share <= fresh_at(before)
    assert fresh_at(before) > 0.5  # most slots are well within it
    assert status.in_flight == 0


def test_checked_ranges_are_not_due_again_until_their_next_slot(
    ranged: Callable[..., Settings], sql: pymysql.cursors.Cursor
) -> None:
    """A second pass runs only spans whose next slot (a period after the one their check recorded)
    came by then: with a period of an hour, almost surely none."""
    settings = ranged(300, period_s=3600)
    one_pass(settings)
    table = ranges_table(settings.sources[0])
    sql.execute(f"SELECT lo, {NOW_US.replace('NOW(6)', '`checked_at`')} + 3600000000 FROM `{table}`")
    next_due = dict(sql.fetchall())
    sql.execute(f"SELECT {NOW_US}")
    before = int(sql.fetchone()[0])
    PLAN.reset()
    one_pass(settings)
    sql.execute(f"SELECT {NOW_US}")
    after = int(sql.fetchone()[0])
    ran = {user // 100 * 100 for user in PLAN.runs}
    assert {lo for lo, due in next_due.items() if due <= before} <= ran
    assert ran <= {lo for lo, due in next_due.items() if due <= after}


def test_ranges_keep_their_slot_at_their_phase_and_an_outage_restarts_at_the_next_one(
    ranged: Callable[..., Settings], sql: pymysql.cursors.Cursor
) -> None:
    """A span's ack records the latest time at or before the check at its phase (pace.slot_us):
    a span checked a little late keeps the slot it was due at; one checked an hour late is not due
    again at once, but at its next slot."""
    settings = ranged(300)  # spans 0, 100, 200, 300; period 10 s
    period_us = 10_000_000
    one_pass(settings)
    table = ranges_table(settings.sources[0])
    us = NOW_US.replace("NOW(6)", "`checked_at`")
    sql.execute(f"UPDATE `{table}` SET checked_at = NOW(6)")  # none due for a period...
    # ...but span 100 (range_id 2), due at its slot (checked_at a period before it), and span 200,
    # an hour ago.
    sql.execute(
        f"UPDATE `{table}` SET checked_at = {slot_sql('`range_id`', period_us)} - INTERVAL {period_us} "
        "MICROSECOND WHERE lo = 100"
    )
    sql.execute(f"UPDATE `{table}` SET checked_at = NOW(6) - INTERVAL 1 HOUR WHERE lo = 200")
    s = store(settings)
    sql.execute(f"SELECT {NOW_US}")
    before = int(sql.fetchone()[0])
    entries = s.claim_due(10)  # the store's own calls: acked within milliseconds, not a loop's pace
    with s.started(entries, ["status"]) as batch:
        assert {r["dc_range"] for r in batch.rows} == {100, 200}
        batch.ack([(row, Ack.default()) for row in batch.rows])
    sql.execute(f"SELECT {NOW_US}")
    after = int(sql.fetchone()[0])
    sql.execute(f"SELECT range_id, {us} FROM `{table}` WHERE lo IN (100, 200) ORDER BY lo")
    for range_id, slot in sql.fetchall():
        assert slot_us(before, range_id, period_us) <= slot <= slot_us(after, range_id, period_us)
        assert (slot - spread_phase_us(range_id, period_us)) % period_us == 0
        assert after - period_us < slot <= after  # not due again until its next slot


def test_a_failed_row_is_counted_and_checked_again_at_its_spans_next_period(
    ranged: Callable[..., Settings], sql: pymysql.cursors.Cursor
) -> None:
    settings = ranged(300)
    rt = ranges_table(settings.sources[0])
    PLAN.fail.add(150)  # in span [100, 200), range_id 2
    PLAN.set_status[120] = 2  # a change in the same span: one failed row does not hold it back

    serve_dispatcher(settings, threading.Event(), drain=True)
    worker = serve_worker(settings, threading.Event(), drain=True)

    assert worker.counts["failed"] == 1
    sql.execute(f"SELECT range_id, dc_state, dc_attempt, rows_seen FROM `{rt}` ORDER BY range_id")
    # users 1..300: spans [0,100) holds 99 of them, [300,400) holds user 300
    assert sql.fetchall() == ((1, 0, 1, 99), (2, 0, 1, 100), (3, 0, 1, 100), (4, 0, 1, 1))
    assert checksum(sql, settings.sources[0].table)[120][0] == 2

    PLAN.fail.clear()
    # Checked just now, every span (the first pass recorded slots up to a period earlier: some
    # would be due again within seconds, at their next slot).
    sql.execute(f"UPDATE `{rt}` SET checked_at = NOW(6)")
    one_pass(settings)
    assert PLAN.attempts[150] == [1]  # nothing is due before the span's next period
    sql.execute(f"UPDATE `{rt}` SET checked_at = checked_at - INTERVAL 10 SECOND WHERE range_id = 2")
    one_pass(settings)

    assert PLAN.attempts[150] == [1, 2]  # checked again with its span, under the span's next attempt
    assert PLAN.runs[50] == 1  # other spans were not run again
    assert PLAN.runs[250] == 1
    sql.execute(f"SELECT SUM(dc_state), SUM(rows_seen) FROM `{rt}`")
    assert tuple(int(v) for v in sql.fetchone()) == (0, 300)
