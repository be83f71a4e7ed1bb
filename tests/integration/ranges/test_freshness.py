"""Freshness of re-scan sources on real MariaDB: worst staleness and the share of rows checked within
period + 1 s, in row mode (bounded counts, an estimate past the cap) and range mode (exact).

Time passes by back-dating the due column in SQL, never by sleeping.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import pymysql
import pytest

from duecast.cli import formats
from duecast.dispatcher.main import serve as serve_dispatcher
from duecast.shared.monitor.freshness import Freshness, measure
from duecast.shared.process.runtime import build_stores
from duecast.shared.queries.ranges import NEVER_CHECKED, ranges_table
from duecast.shared.settings import MySQLSettings, RedisSettings, Settings
from duecast.shared.storage import freshness
from duecast.shared.storage.admin import migrate
from duecast.shared.storage.range_store import RangeStore
from duecast.worker.main import serve as serve_worker
from tests.integration import range_app
from tests.integration.conftest import Env

pytestmark = pytest.mark.integration


def test_row_mode_counts_rows_checked_within_period_plus_one_second(make_env: Callable[..., Env]) -> None:
    env = make_env("rescan", rows=10)  # period 10 s; every row last checked an hour ago
    env.sql.execute(
        f"UPDATE `{env.table}` SET updated_time = NOW(6) - INTERVAL 10500000 MICROSECOND WHERE user_id <= 3"
    )
    env.sql.execute(f"UPDATE `{env.table}` SET updated_time = NOW(6) - INTERVAL 12 SECOND WHERE user_id = 4")

    fresh = measure(env.store, env.store.status())

    assert fresh is not None
    assert (fresh.fresh_share, fresh.exact) == (0.3, True)  # 10.5 s counts (period + 1 s), 12 s does not
    assert fresh.worst_staleness_s is not None
    assert 3600 <= fresh.worst_staleness_s < 3610


def test_a_claimed_row_stays_stale_until_its_ack(make_env: Callable[..., Env]) -> None:
    env = make_env("rescan", rows=4)
    env.sql.execute(f"UPDATE `{env.table}` SET updated_time = NOW(6) WHERE user_id <= 2")
    assert [e.id for e in env.store.claim_due(10)] == [3, 4]

    fresh = measure(env.store, env.store.status())
    assert fresh is not None
    assert (fresh.fresh_share, fresh.exact) == (0.5, True)  # dispatched, not yet checked


def test_past_the_cap_the_total_is_innodbs_estimate(
    make_env: Callable[..., Env], monkeypatch: pytest.MonkeyPatch
) -> None:
    env = make_env("rescan", rows=20)
    env.sql.execute(f"UPDATE `{env.table}` SET updated_time = NOW(6) WHERE user_id <= 12")  # 8 stale
    env.sql.execute(f"ANALYZE TABLE `{env.table}`")
    env.sql.fetchall()
    monkeypatch.setattr(freshness, "COUNT_CAP", 5)

    fresh = measure(env.store, env.store.status())

    # Stale rows are counted up to the cap (5), the total is InnoDB's estimate (exact after ANALYZE
    # on a table this small): an upper bound of the share, reported as not exact.
    assert fresh is not None
    assert (fresh.fresh_share, fresh.exact) == (0.75, False)


def test_an_empty_table_has_no_freshness_yet(make_env: Callable[..., Env]) -> None:
    env = make_env("rescan", rows=0)
    assert measure(env.store, env.store.status()) == Freshness(None, None, True)


def test_one_off_sources_have_no_freshness(make_env: Callable[..., Env]) -> None:
    env = make_env("oneoff", rows=3)
    assert measure(env.store, env.store.status()) is None


def test_range_mode_is_exact_and_counts_rows_not_ranges(
    mysql_settings: MySQLSettings, redis_settings: RedisSettings, sql: pymysql.cursors.Cursor
) -> None:
    src = range_app.users_source(sql, 250)
    table = src.table
    settings = Settings(
        mysql=mysql_settings,
        redis=redis_settings,
        sources=[src],
        jobs={"enabled": False},  # type: ignore[arg-type]
        worker={"app": "tests.integration.range_app:handlers"},  # type: ignore[arg-type]
    )
    range_app.PLAN.reset()
    try:
        migrate.apply(settings)
        serve_dispatcher(settings, threading.Event(), drain=True)
        serve_worker(settings, threading.Event(), drain=True)
        # Span [200, 300) holds 51 rows (200..250); it was checked a minute ago, the others just now.
        # Set both here rather than trust the drains' own times: on a loaded machine a span checked
        # early in the drain (or paced to a later slot) can be past its period by the time we measure.
        sql.execute(
            f"UPDATE `{ranges_table(src)}` SET checked_at = IF(lo = 200, NOW(6) - INTERVAL 60 SECOND, NOW(6))"
        )
        (store,) = build_stores(settings, settings.sources)
        assert isinstance(store, RangeStore)

        fresh = measure(store, store.status())

        assert fresh is not None
        assert (fresh.fresh_share, fresh.exact) == (199 / 250, True)
        assert fresh.worst_staleness_s is not None
        assert 60 <= fresh.worst_staleness_s < 70
        assert fresh.first_pass is None  # every range has been checked once

        # As if the first pass had not reached span [200, 300) yet: its rows are unknown (rows_seen 0).
        sql.execute(
            f"UPDATE `{ranges_table(src)}` SET checked_at = '{NEVER_CHECKED}', rows_seen = 0 WHERE lo = 200"
        )
        fresh = measure(store, store.status())

        assert fresh is not None
        assert fresh.first_pass == pytest.approx(2 / 3)
        # The two checked spans' 199 rows are all fresh, but the share is not 100%: the unreached
        # span counts as stale, taken to hold as many rows as a checked one.
        assert fresh.fresh_share == pytest.approx(2 / 3)
        assert formats.share(fresh) == "first pass 66%"
        assert formats.staleness(fresh) == "never"
    finally:
        sql.execute(f"DROP TABLE IF EXISTS `{table}`, `{ranges_table(src)}`")
