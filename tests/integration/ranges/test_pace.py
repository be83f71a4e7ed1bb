"""An even pace on real MariaDB + Redis: a table that starts all due is checked at rows/period per
second from its second period on, in range mode and row mode (shared.queries.pace): each check
records its key's slot, so the next period's due times spread evenly, whatever the start."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pymysql
import pytest

from duecast.dispatcher.main import serve as serve_dispatcher
from duecast.shared.pace import spread_phase_us
from duecast.shared.queries.pace import NOW_US
from duecast.shared.queries.ranges import ranges_table
from duecast.shared.settings import MySQLSettings, RedisSettings, Settings, SourceSettings
from duecast.shared.storage.admin import migrate
from duecast.worker.main import serve as serve_worker
from tests.integration import range_app
from tests.integration.range_app import PLAN

pytestmark = pytest.mark.integration

USERS, PERIOD_S = 2_000, 4
PERIOD_US = PERIOD_S * 1_000_000


@pytest.fixture
def paced(
    mysql_settings: MySQLSettings, redis_settings: RedisSettings, sql: pymysql.cursors.Cursor
) -> Iterator[Callable[..., Settings]]:
    """paced(mode=...) -> settings for a source of 2,000 users, all due, period 4 s, migrated."""
    made: list[SourceSettings] = []

    def make(**overrides: Any) -> Settings:
        src = range_app.users_source(
            sql, USERS, period_s=PERIOD_S, range_size=10, claim_batch=500, high_water=5000, **overrides
        )
        made.append(src)
        settings = Settings(
            mysql=mysql_settings,
            redis=redis_settings,
            sources=[src],
            jobs={"enabled": False},  # type: ignore[arg-type]
            worker={"app": "tests.integration.range_app"},  # type: ignore[arg-type]
            # Claims five times as often as by default: each carries a twentieth of a second's
            # checks, so where one lands moves no second's count by more than 5%.
            dispatcher={"poll_interval_s": 0.05},  # type: ignore[arg-type]
        )
        migrate.apply(settings)
        PLAN.reset()
        return settings

    yield make
    for src in made:
        sql.execute(f"DROP TABLE IF EXISTS `{src.table}`")
        sql.execute(f"DROP TABLE IF EXISTS `{ranges_table(src)}`")


def one_pass(settings: Settings) -> None:
    serve_dispatcher(settings, threading.Event(), drain=True)
    serve_worker(settings, threading.Event(), drain=True)


def due_windows(sql: pymysql.cursors.Cursor, table: str, key: str, due: str, weight: str) -> list[int]:
    """Rows due in each second of the next period, by where in the period each is due."""
    us = NOW_US.replace("NOW(6)", f"`{due}`")
    sql.execute(
        f"SELECT MOD({us}, {PERIOD_US}) DIV 1000000, SUM({weight}) FROM `{table}` GROUP BY 1 ORDER BY 1"
    )
    counts = dict(sql.fetchall())
    return [int(counts.get(second, 0)) for second in range(PERIOD_S)]


def assert_at_their_phases(sql: pymysql.cursors.Cursor, table: str, key: str, due: str) -> None:
    """Each key's recorded slot is at the phase the pure policy gives it."""
    sql.execute(f"SELECT `{key}`, MOD({NOW_US.replace('NOW(6)', f'`{due}`')}, {PERIOD_US}) FROM `{table}`")
    phases = dict(sql.fetchall())
    assert phases == {k: spread_phase_us(k, PERIOD_US) for k in phases}


def assert_even(windows: list[int]) -> None:
    rate = USERS / PERIOD_S
    assert sum(windows) == USERS
    assert all(abs(w - rate) <= 0.1 * rate for w in windows), windows


def test_range_mode_spreads_a_table_that_starts_all_due_over_the_period(
    paced: Callable[..., Settings], sql: pymysql.cursors.Cursor
) -> None:
    settings = paced()
    one_pass(settings)  # every span checked within the same second or so
    table = ranges_table(settings.sources[0])
    assert_even(due_windows(sql, table, "range_id", "checked_at", "rows_seen"))
    # Each span's checked_at is its slot: at the phase the pure policy gives its range_id.
    assert_at_their_phases(sql, table, "range_id", "checked_at")
    sql.execute(f"SELECT MAX(checked_at <= NOW(6)) FROM `{table}`")
    assert sql.fetchone()[0] == 1  # a slot is never later than its check


def test_row_mode_spreads_a_table_that_starts_all_due_over_the_period(
    paced: Callable[..., Settings], sql: pymysql.cursors.Cursor
) -> None:
    settings = paced(mode="rows")
    src = settings.sources[0]
    one_pass(settings)
    assert_even(due_windows(sql, src.table, "user_id", "updated_time", "1"))
    assert_at_their_phases(sql, src.table, "user_id", "updated_time")


def per_second(times: list[float], start: float, seconds: int) -> list[int]:
    counts = [0] * seconds
    for t in times:
        second = int(t - start)
        if 0 <= second < seconds:
            counts[second] += 1
    return counts


@pytest.mark.parametrize("mode", ["ranges", "rows"])
def test_checks_per_second_settle_within_ten_percent_of_rows_per_period(
    paced: Callable[..., Settings], mode: str
) -> None:
    """Real loops, real seconds (about 9 s): all due at the start, then the 1-s windows of the
    second period."""
    settings = paced(mode=mode)
    stop = threading.Event()
    roles = [threading.Thread(target=f, args=(settings, stop)) for f in (serve_dispatcher, serve_worker)]
    start = time.monotonic()
    for role in roles:
        role.start()
    try:
        deadline = start + 2 * PERIOD_S + 0.5
        while time.monotonic() < deadline:  # the second period's windows must be complete
            time.sleep(0.05)
    finally:
        stop.set()
        for role in roles:
            role.join(timeout=30)
    with PLAN.lock:
        times = list(PLAN.times)
    windows = per_second(times, start, 2 * PERIOD_S)[PERIOD_S:]
    rate = USERS / PERIOD_S
    # ±20%: the schedule itself is within ±10% (the tests above); a loaded test host adds a few
    # hundred milliseconds of jitter to when checks run.
    assert all(abs(w - rate) <= 0.2 * rate for w in windows), windows


def test_the_pace_holds_through_a_restart_of_the_dispatcher_and_the_worker(
    paced: Callable[..., Settings],
) -> None:
    """Range mode, real seconds (about 13 s): both roles stop half-way through the second period
    and start again; the checks keep their phases, so the third period's 1-s windows are even."""
    settings = paced()

    def start() -> tuple[threading.Event, list[threading.Thread]]:
        stop = threading.Event()
        roles = [threading.Thread(target=f, args=(settings, stop)) for f in (serve_dispatcher, serve_worker)]
        for role in roles:
            role.start()
        return stop, roles

    def end(stop: threading.Event, roles: list[threading.Thread]) -> None:
        stop.set()
        for role in roles:
            role.join(timeout=30)

    began = time.monotonic()
    first = start()
    try:
        while time.monotonic() < began + 1.5 * PERIOD_S:
            time.sleep(0.05)
    finally:
        end(*first)
    second = start()
    try:
        while time.monotonic() < began + 3 * PERIOD_S + 0.5:  # the third period's windows complete
            time.sleep(0.05)
    finally:
        end(*second)
    with PLAN.lock:
        times = list(PLAN.times)
    windows = per_second(times, began, 3 * PERIOD_S)[2 * PERIOD_S :]
    rate = USERS / PERIOD_S
    assert all(abs(w - rate) <= 0.2 * rate for w in windows), windows
