"""A cluster consumer group's fleet-wide limits at claim time on real MariaDB: its rate binds the
messages claimed per second (retries and new ones alike), max_running counts its deliveries
dispatched within the visibility timeout or started under a live lease, `duecast status` shows its
bucket as group:<topic>/<group>, and an unlimited group's claim runs the statements it always ran."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from dataclasses import asdict
from typing import Any

import pymysql
import pytest

from duecast.dispatcher.limits import Limiter
from duecast.shared.process.runtime import build_stores
from duecast.shared.settings import DispatcherSettings
from duecast.shared.storage.leased.groups import GroupStore
from duecast.shared.storage.limits import read_limits
from tests.integration.topics.topics_env import TopicsEnv, groups

pytestmark = pytest.mark.integration
LIMITS = DispatcherSettings().limits_table
BUCKET = "group:orders/billing"


@pytest.fixture(autouse=True)
def fresh_buckets(sql: pymysql.cursors.Cursor) -> Iterator[None]:
    yield
    sql.execute(f"DELETE FROM `{LIMITS}`")


def _billing(make_env: Any, messages: int, **limits: Any) -> tuple[TopicsEnv, GroupStore]:
    env: TopicsEnv = make_env(groups=groups(billing={"max_retries": 3, **limits}))
    for _ in range(messages):
        env.publisher.publish("orders", "x")
    (store,) = [
        s
        for s in build_stores(env.settings, env.settings.topics.group_sources())
        if isinstance(s, GroupStore) and s.group.name == "billing"
    ]
    return env, store


def _in_flight(env: TopicsEnv, store: GroupStore) -> int:
    """What the group has out: dispatched within the visibility timeout, or running under a lease."""
    (row,) = env.query(
        "SELECT COUNT(*) FROM {deliveries} WHERE group_id = %s AND ((dc_state = 1 AND "
        "dc_dispatched_at > NOW(6) - INTERVAL 60 SECOND) OR (dc_state = 2 AND lease_until > NOW(6)))",
        (store.group_id,),
    )
    return int(row[0])


def test_a_groups_rate_binds_the_messages_claimed_per_second(make_env: Any) -> None:
    rate, burst = 40.0, 4.0
    env, store = _billing(make_env, 400, rate_limit_per_s=rate, rate_burst=burst)
    limiter = Limiter([store], LIMITS)
    assert BUCKET in {lim.name for lim, _ in limiter.limits.values()}
    deadline = time.monotonic() + 3.0
    claimed = 0
    while time.monotonic() < deadline:
        claimed += len(limiter.claim(store, 1000))
        time.sleep(limiter.delay_s(store, 0.02))
    # The claims' own times (dc_dispatched_at, MySQL's NOW(6) in each claim's transaction).
    times = sorted(
        float(t)
        for (t,) in env.query(
            "SELECT UNIX_TIMESTAMP(dc_dispatched_at) FROM {deliveries} WHERE group_id = %s", (store.group_id,)
        )
    )
    assert len(times) == claimed
    busiest = max(sum(1 for u in times[i:] if u < t + 1.0) for i, t in enumerate(times))
    print(f"\ngroup rate {rate}/s burst {burst}: {claimed} claimed in 3 s, busiest 1-s window {busiest}")
    assert busiest <= 1.05 * rate + burst, busiest
    assert claimed >= 0.5 * rate * 3, "the rate is met, not just bounded (half of it, on a loaded machine)"


def test_a_groups_max_running_is_never_exceeded_and_a_dead_workers_slots_come_back(
    make_env: Any,
) -> None:
    env, store = _billing(make_env, 50, max_running=5)
    limiter = Limiter([store], LIMITS)

    def claim() -> list[int]:
        got = [e.id for e in limiter.claim(store, 100)]
        assert _in_flight(env, store) <= 5, "max_running exceeded"
        return got

    first = claim()
    assert len(first) == 5
    assert claim() == []
    # Two start under a worker that then dies: counted while their leases live, free once they ran out.
    two = tuple(first[:2])
    env.query(
        "UPDATE {deliveries} SET dc_state = 2, lease_until = NOW(6) + INTERVAL 10 SECOND "
        "WHERE group_id = %s AND seq IN %s",
        (store.group_id, two),
    )
    assert claim() == []
    env.query(
        "UPDATE {deliveries} SET lease_until = NOW(6) - INTERVAL 1 SECOND WHERE group_id = %s AND seq IN %s",
        (store.group_id, two),
    )
    again = claim()
    assert len(again) == 2
    # One dispatched sits past the visibility timeout (its entry lost): not in flight.
    env.query(
        "UPDATE {deliveries} SET dc_dispatched_at = NOW(6) - INTERVAL 1 HOUR "
        "WHERE group_id = %s AND seq = %s",
        (store.group_id, first[2]),
    )
    assert len(claim()) == 1
    # Three finish: their slots come back. A dispatcher that reserved and died holds them until its
    # reservation ends.
    env.query(
        "UPDATE {deliveries} SET dc_state = 3 WHERE group_id = %s AND seq IN %s",
        (store.group_id, (*first[3:5], again[0])),
    )
    (lim, _table) = limiter.limits[store.src.name]
    assert lim.reserve(3).entries == 3  # ...and never settled
    assert claim() == []
    env.sql.execute(f"UPDATE `{LIMITS}` SET reserved_until = NOW(6) - INTERVAL 1 SECOND")
    assert len(claim()) == 3
    # Retries due again count like new messages: none past the limit.
    env.query("UPDATE {deliveries} SET dc_state = 0, run_at = NOW(6) WHERE group_id = %s", (store.group_id,))
    assert len(claim()) == 5


def _recorded(store: GroupStore) -> list[str]:
    """The statements the store runs from now on, as sent (before their arguments)."""
    seen: list[str] = []
    real = store.db.transaction

    @contextlib.contextmanager
    def recording(**kw: Any) -> Iterator[Any]:
        with real(**kw) as cur:
            execute = cur.execute

            def record(stmt: str, args: Any = None) -> Any:
                seen.append(stmt)
                return execute(stmt, args)

            cur.execute = record  # type: ignore[method-assign]
            yield cur

    store.db.transaction = recording  # type: ignore[method-assign]
    return seen


def test_an_unlimited_groups_claim_is_as_before(make_env: Any) -> None:
    """No limit: the limiter hands the claim to the store, which runs only the topics' statements."""
    env, store = _billing(make_env, 10)
    limiter = Limiter([store], LIMITS)
    assert limiter.limits == {}
    seen = _recorded(store)
    assert len(limiter.claim(store, 1000)) == 10
    env.query("UPDATE {deliveries} SET dc_state = 0, run_at = NOW(6) WHERE group_id = %s", (store.group_id,))
    assert len(limiter.claim(store, 1000)) == 10
    known = [s for s in asdict(store.sql).values() if isinstance(s, str)]
    exact = {k for k in known if "{" not in k}
    formatted = [k.split("{")[0] for k in known if "{" in k]
    assert seen, "the claim ran nothing"
    for stmt in seen:
        assert stmt in exact or any(stmt.startswith(f) for f in formatted), stmt
    assert not [s for s in seen if LIMITS in s]
    env.sql.execute(f"SELECT COUNT(*) FROM `{LIMITS}`")
    assert env.sql.fetchone() == (0,), "no bucket row for an unlimited group"


def test_status_shows_a_groups_limits_as_group_topic_name(make_env: Any) -> None:
    env, store = _billing(make_env, 3, rate_limit_per_s=2, rate_burst=5, max_running=9)
    Limiter([store], LIMITS).claim(store, 1000)
    (state,) = read_limits(store.db, LIMITS, [s for s in env.settings.all_sources() if s.limited])
    assert (state.name, state.rate_limit_per_s, state.burst, state.max_running) == (BUCKET, 2, 5, 9)
    assert state.tokens is not None
    assert 2 <= state.tokens < 2.5, "5 less the 3 messages claimed"
