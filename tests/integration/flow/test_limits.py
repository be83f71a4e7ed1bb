"""Fleet-wide limits at claim time on real MariaDB (dispatcher/limits.py, shared/storage/limits.py):
a rate counts rows, not spans; max_running counts what is dispatched or started under a live lease,
so a dead worker's rows and a dead dispatcher's reservation come back; demand above a re-scan
source's rate is said once. Time passes by back-dating columns in SQL."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator

import pymysql
import pytest

from duecast import cli
from duecast.dispatcher.limits import Limiter
from duecast.shared.process.runtime import build_stores
from duecast.shared.queries.ranges import ranges_table
from duecast.shared.settings import DispatcherSettings, MySQLSettings, RedisSettings, Settings
from duecast.shared.storage.admin import migrate
from duecast.shared.storage.range_store import RangeStore
from duecast.shared.storage.schema import SchemaError
from duecast.shared.storage.source_store import Store
from tests.integration import range_app
from tests.integration.cli.test_cli import cli_env, sources_json  # noqa: F401 - a fixture
from tests.integration.conftest import Env

pytestmark = pytest.mark.integration
LIMITS = DispatcherSettings().limits_table


@pytest.fixture(autouse=True)
def fresh_buckets(sql: pymysql.cursors.Cursor) -> Iterator[None]:
    yield
    sql.execute(f"DELETE FROM `{LIMITS}`")


def _set_bucket(sql: pymysql.cursors.Cursor, name: str, tokens: float, ago_s: float = 0.0) -> None:
    sql.execute(
        f"UPDATE `{LIMITS}` SET tokens = %s, refilled_at = NOW(6) - INTERVAL %s MICROSECOND WHERE name = %s",
        (tokens, round(ago_s * 1e6), name),
    )


def _tokens(sql: pymysql.cursors.Cursor, name: str) -> float:
    sql.execute(f"SELECT tokens FROM `{LIMITS}` WHERE name = %s", (name,))
    return float(sql.fetchone()[0])


@pytest.fixture
def ranged(
    mysql_settings: MySQLSettings, redis_settings: RedisSettings, sql: pymysql.cursors.Cursor
) -> Iterator[Callable[..., RangeStore]]:
    made: list[Settings] = []

    def make(users: int, **limits: object) -> RangeStore:
        src = range_app.users_source(sql, users, **limits)
        settings = Settings(
            mysql=mysql_settings,
            redis=redis_settings,
            sources=[src],
            jobs={"enabled": False},  # type: ignore[arg-type]
        )
        migrate.apply(settings)
        made.append(settings)
        (store,) = build_stores(settings, settings.sources)
        assert isinstance(store, RangeStore)
        store.discover(full=True)
        return store

    yield make
    for settings in made:
        for src in settings.sources:
            sql.execute(f"DROP TABLE IF EXISTS `{src.table}`, `{ranges_table(src)}`")


def test_a_range_mode_rate_counts_rows_not_spans(
    ranged: Callable[..., RangeStore], sql: pymysql.cursors.Cursor
) -> None:
    store = ranged(1000, rate_limit_per_s=100, rate_burst=250)  # spans of 100 ids
    limiter = Limiter([store], LIMITS)
    first = limiter.claim(store, 10)
    assert len(first) == 2, "a full bucket of 250 rows pays for two spans of 100"
    assert 50 <= _tokens(sql, store.src.name) < 51
    _set_bucket(sql, store.src.name, 50.0)
    assert limiter.claim(store, 10) == [], "50 rows cannot pay for a span of 100"
    _set_bucket(sql, store.src.name, 50.0, ago_s=1.0)  # a second at 100 rows/s
    assert len(limiter.claim(store, 10)) == 1
    _set_bucket(sql, store.src.name, 0.0, ago_s=60.0)  # a long quiet spell: only the burst
    assert len(limiter.claim(store, 10)) == 2


def test_a_range_mode_max_running_counts_the_rows_of_spans_in_flight(
    ranged: Callable[..., RangeStore],
) -> None:
    store = ranged(1000, max_running=300)
    limiter = Limiter([store], LIMITS)
    assert len(limiter.claim(store, 10)) == 3
    assert limiter.claim(store, 10) == []


def _claimed(limiter: Limiter, store: Store, room: int) -> list[int]:
    return [e.id for e in limiter.claim(store, room)]


def test_max_running_gives_back_the_slots_of_a_dead_worker_and_a_dead_dispatcher(
    make_env: Callable[..., Env],
) -> None:
    env = make_env("oneoff", rows=50, max_running=5, lease_s=10)
    limiter = Limiter([env.store], LIMITS)
    first = _claimed(limiter, env.store, 100)
    assert len(first) == 5
    assert _claimed(limiter, env.store, 100) == []
    # Two start, under a worker that then dies: counted while their lease lives, free once it ran out.
    env.query("UPDATE {t} SET dc_state = 2, dc_dispatched_at = NOW(6) WHERE {pk} IN %s", (tuple(first[:2]),))
    assert _claimed(limiter, env.store, 100) == []
    env.backdate_dispatch(11, where=f"id IN ({first[0]}, {first[1]})")
    assert len(_claimed(limiter, env.store, 100)) == 2
    # One dispatched row sits past its visibility timeout (its entry lost): not in flight.
    env.backdate_dispatch(3600, where=f"id = {first[2]}")
    assert len(_claimed(limiter, env.store, 100)) == 1
    # Three finish (their rows deleted). A dispatcher that reserved slots and died before
    # claiming holds them until its reservation ends.
    done = env.query(
        "SELECT {pk} FROM {t} WHERE dc_state = 1 AND dc_dispatched_at > NOW(6) - INTERVAL 1 MINUTE LIMIT 3"
    )
    env.query("DELETE FROM {t} WHERE {pk} IN %s", (tuple(r[0] for r in done),))
    (lim, _table) = limiter.limits[env.source.name]
    assert lim.reserve(3).entries == 3  # ...and never settled
    assert _claimed(limiter, env.store, 100) == []
    env.sql.execute(f"UPDATE `{LIMITS}` SET reserved_until = NOW(6) - INTERVAL 1 SECOND")
    assert len(_claimed(limiter, env.store, 100)) == 3


def test_a_rate_holds_across_two_dispatchers(
    make_env: Callable[..., Env], sql: pymysql.cursors.Cursor
) -> None:
    env = make_env("oneoff", rows=500, rate_limit_per_s=1, rate_burst=40)
    other = env.other_store()  # a second dispatcher's session
    one, two = Limiter([env.store], LIMITS), Limiter([other], LIMITS)
    taken = _claimed(one, env.store, 30) + _claimed(two, other, 30)
    assert len(taken) == 40, "the second dispatcher gets only what the first left in the shared bucket"
    assert len(set(taken)) == 40
    assert _tokens(sql, env.source.name) < 1


def test_demand_above_a_rate_is_said_once_with_the_period_it_allows(
    make_env: Callable[..., Env], caplog: pytest.LogCaptureFixture
) -> None:
    env = make_env("rescan", rows=300, rate_limit_per_s=10)  # 300 rows every 10 s ask 30 checks/s
    limiter = Limiter([env.store], LIMITS)
    with caplog.at_level(logging.WARNING, logger="duecast.limits"):
        limiter.claim(env.store, 100)
        limiter._counted_at.clear()  # as if a minute had passed: counted again, not said again
        limiter.claim(env.store, 100)
    said = [r.getMessage() for r in caplog.records if "above rate_limit_per_s" in r.getMessage()]
    assert len(said) == 1, said
    assert "allows a period of 30.0s" in said[0]
    assert limiter.over == {env.source.name: 30.0}


def test_status_shows_each_limit_and_the_period_a_rate_allows(
    cli_env: dict[str, str],  # noqa: F811
    make_env: Callable[..., Env],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    env = make_env("rescan", rows=300, rate_limit_per_s=10, max_running=50)
    Limiter([env.store], LIMITS).claim(env.store, 100)
    monkeypatch.setenv("DUECAST_SOURCES", sources_json(env.source))
    monkeypatch.setenv("COLUMNS", "200")

    assert cli.main(["status", "--json"]) == 0
    (limit,) = json.loads(capsys.readouterr().out)["limits"]
    assert limit["name"] == env.source.name
    assert (limit["rate_limit_per_s"], limit["burst"], limit["max_running"]) == (10, 2, 50)
    assert 0 <= limit["tokens"] <= 2
    assert limit["allowed_period_s"] == 30.0

    assert cli.main(["status"]) == 0
    out = capsys.readouterr().out
    assert (
        f"{env.source.name}: demand above rate_limit_per_s (10/s); the limit allows a period of 30.0s" in out
    )


def test_a_limit_without_its_table_stops_the_dispatcher_in_one_line(make_env: Callable[..., Env]) -> None:
    env = make_env("oneoff", rows=1, rate_limit_per_s=10)
    with pytest.raises(SchemaError, match=r"table no_limits_here is missing; run `duecast migrate`"):
        Limiter([env.store], "no_limits_here")


def test_a_claim_held_back_by_max_running_waits_at_the_dispatchers_pace(make_env: Callable[..., Env]) -> None:
    # 10 tokens a second, so the empty bucket below stays under one token for 100 ms: at 1,000/s it
    # held one after 1 ms, and a loaded machine's DELETE and claim took longer (5 rows claimed).
    # A burst of 6 leaves a token after the first claim, and makes a claim worth 1.5 tokens.
    env = make_env("oneoff", rows=50, rate_limit_per_s=10, rate_burst=6, max_running=5)
    limiter = Limiter([env.store], LIMITS)
    assert len(limiter.claim(env.store, 100)) == 5
    assert limiter.delay_s(env.store, 0.2) == 0.2, "tokens are plenty: no refill to wait for"
    _set_bucket(env.sql, env.source.name, 0.0)
    env.query("DELETE FROM {t} WHERE dc_state = 1")  # they finished: 5 slots, no tokens
    assert limiter.claim(env.store, 100) == []
    assert 0 < limiter.delay_s(env.store, 0.2) < 0.2, "held back by the rate: claim again on its refill"
