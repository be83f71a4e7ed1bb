"""Topics on real MariaDB + Redis, each role run once in-process (drain mode): trace, transactional
consumers, retention, status, lost entries and leases, and the dispatcher's topics duty.

Time passes by back-dating run_at / created_at / lease_until in SQL, never by sleeping.
"""

from __future__ import annotations

import os
import threading
from typing import Any

import pytest
from prometheus_client import REGISTRY

from duecast.dispatcher.main import serve as serve_dispatcher
from duecast.dispatcher.topics import TopicKeeper
from duecast.shared.api.publish import Publish
from duecast.shared.entries import Entry
from duecast.shared.process.runtime import build_stores
from duecast.shared.states import State
from duecast.shared.storage.db import Database
from duecast.shared.storage.leased.keeper import Extended
from duecast.shared.storage.member_store import member_name
from duecast.shared.storage.topic_status import TopicMonitor
from tests.integration.topics.topics_env import TopicsEnv, groups

pytestmark = pytest.mark.integration


def test_trace_shows_per_group_dispatch_start_worker_and_each_attempts_outcome(env: TopicsEnv) -> None:
    msg = env.publisher.publish("orders", {"fail": ["billing"]}, key="order:7")
    env.run_once()
    env.make_due()
    env.run_once()
    assert [m["seq"] for m in env.admin.find("orders", "order:7")] == [msg]
    trace = env.admin.trace("orders", msg)
    assert set(trace) == {"billing", "shipping", "audit", "cache"}
    shipping = trace["shipping"]["delivery"]
    assert shipping["dc_state"] == State.DONE
    assert shipping["worker"].endswith(f":{os.getpid()}")
    assert shipping["dc_dispatched_at"] <= shipping["started_at"] <= shipping["finished_at"]
    billing = trace["billing"]
    assert (billing["delivery"]["dc_state"], billing["delivery"]["dc_attempt"]) == (State.IDLE, 2)
    attempts = billing["attempts"]
    assert [(a["attempt"], a["outcome"]) for a in attempts] == [(1, "failed"), (2, "failed")]
    for a in attempts:
        assert a["worker"].endswith(f":{os.getpid()}")
        assert a["dispatched_at"] <= a["started_at"] <= a["ended_at"]
        assert "RuntimeError: billing cannot take message" in a["error"]
    assert trace["cache"]["read_by"] == [member_name(env.settings.topics)]


def test_a_transactional_consumers_writes_commit_with_the_messages_ack(env: TopicsEnv) -> None:
    env.sql.execute("CREATE TABLE `effects` (grp VARCHAR(32), msg BIGINT)")
    try:
        ids = env.publisher.publish_many(Publish("ledger", {"table": "effects"}) for _ in range(20))
        env.run_once()
        assert env.query("SELECT grp, msg FROM effects ORDER BY msg") == [("books", i) for i in ids]
    finally:
        env.sql.execute("DROP TABLE `effects`")


def test_retention_deletes_only_what_every_group_finished_and_reports_a_group_behind(
    make_env: Any,
) -> None:
    env = make_env(retention_s=3600)
    ids = env.publisher.publish_many(
        Publish("orders", {"fail": ["billing"]} if n == 2 else n) for n in range(10)
    )
    env.run_once()
    env.query("UPDATE {messages} SET created_at = created_at - INTERVAL 2 HOUR")
    fresh = env.publisher.publish("orders", "fresh")  # within retention: kept whatever happens

    assert env.admin.prune(1000) == 2  # billing has not finished message 3: it and all after stay
    assert [int(r[0]) for r in env.query("SELECT seq FROM {messages} ORDER BY seq")] == [*ids[2:], fresh]
    assert min(env.deliveries("shipping")) == ids[2]
    behind = {s.group: s.behind_retention for s in env.monitor.groups()}
    assert behind == {"billing": True, "shipping": False, "audit": False, "cache": False, "books": False}

    for _ in range(3):  # billing gives up on it: dead letters count as finished
        env.make_due()
        env.run_once()
    assert env.deliveries("billing")[ids[2]][0] == State.DEAD
    assert env.admin.prune(1000) == 8
    assert [int(r[0]) for r in env.query("SELECT seq FROM {messages}")] == [fresh]


def test_status_reports_backlog_lag_in_flight_and_consumption_timeouts(make_env: Any) -> None:
    env = make_env(groups=groups(billing={"timeout_s": 60}))
    ids = env.publisher.publish_many(Publish("orders", n) for n in range(20))
    env.query("UPDATE {messages} SET created_at = created_at - INTERVAL 1 HOUR")
    env.publisher.publish_many(Publish("ledger", {"table": "nowhere"}) for _ in range(3))
    serve_dispatcher(env.settings, threading.Event(), drain=True)  # all dispatched, none started
    store, other, late = (cluster_store(env, "billing") for _ in range(3))  # three workers' batches
    with (
        store.started([Entry(i, 1) for i in ids[:5]]),
        other.started([Entry(i, 1) for i in ids[5:8]]),
        late.started([Entry(i, 1) for i in ids[8:10]]),
    ):
        # Two batches started 2 and 3 minutes ago, the third just now. A batch is marked running
        # whole and runs its handlers in turn: only its first message has surely been running that
        # long, the others may wait behind it (issue 16.7), so each batch counts once.
        running = "dc_state = 2 AND seq IN ({})"
        env.query(
            "UPDATE {deliveries} SET started_at = NOW(6) - INTERVAL 2 MINUTE WHERE "
            + running.format("%s," * 4 + "%s"),
            ids[:5],
        )
        env.query(
            "UPDATE {deliveries} SET started_at = NOW(6) - INTERVAL 3 MINUTE WHERE "
            + running.format("%s,%s,%s"),
            ids[5:8],
        )
        status = {s.group: s for s in env.monitor.groups()}
    billing, audit = status["billing"], status["audit"]
    assert (billing.backlog, billing.in_flight, billing.timeouts) == (20, 20, 2)
    assert 179 <= (billing.oldest_running_s or 0) <= 190
    assert (audit.backlog, audit.in_flight, audit.timeouts) == (20, 20, 0)
    assert 3590 <= (billing.lag_s or 0) <= 3700
    assert (status["cache"].backlog, status["cache"].members) == (0, [])  # no live member: nobody waits

    volumes = env.monitor.volumes()
    assert [(t, last, v["hour"], v["day"]) for t, last, v in volumes] == [
        ("ledger", 3, 3, 3),  # the busiest topic of the last hour first: orders' are 1 h old
        ("orders", 20, 0, 20),
    ]
    assert env.monitor.series("orders", 3, 3600) == [0, 20, 0]


def cluster_store(env: TopicsEnv, group: str) -> Any:
    (store,) = [
        s
        for s in build_stores(env.settings, env.settings.topics.group_sources())
        if s.src.name.endswith(group)
    ]
    return store


def test_lost_entries_and_interrupted_runs_come_back_traced_and_dead_after_max_interruptions(
    make_env: Any,
) -> None:
    env = make_env(max_interruptions=2)
    store = cluster_store(env, "-audit")
    msg = env.publisher.publish("orders", "m")
    (entry,) = store.claim_due(10)
    assert store.requeue_expired(60, 100) == 0  # dispatched just now: not lost yet
    env.query("UPDATE {deliveries} SET dc_dispatched_at = NOW(6) - INTERVAL 1 HOUR")
    assert store.requeue_expired(60, 100) == 1  # its entry never reached a worker
    for _ in (1, 2):
        (entry,) = store.claim_due(10)
        with store.started([entry]):
            pass  # the worker "died" here: RUNNING was committed, nothing finished it
        assert store.requeue_expired(60, 100) == 0  # the lease still holds
        env.query("UPDATE {deliveries} SET lease_until = NOW(6) - INTERVAL 1 SECOND WHERE dc_state = 2")
        assert store.requeue_expired(60, 100) == 1
    trace = env.admin.trace("orders", msg)["audit"]
    assert [(a["attempt"], a["outcome"]) for a in trace["attempts"]] == [
        (1, "lost"),
        (2, "interrupted"),
        (3, "interrupted"),
    ]
    assert (trace["delivery"]["dc_state"], trace["delivery"]["interruptions"]) == (State.DEAD, 2)
    assert "interrupted 2 times" in trace["delivery"]["last_error"]
    assert store.claim_due(10) == []


def test_a_kept_lease_moves_forward_and_a_stale_one_does_not(env: TopicsEnv) -> None:
    store = cluster_store(env, "-audit")
    env.publisher.publish_many(Publish("orders", n) for n in range(2))
    first, second = store.claim_due(10)
    with store.started([first, second]):
        env.query("UPDATE {deliveries} SET lease_until = NOW(6) + INTERVAL 1 SECOND")
        stale = Entry(second.id, second.attempt + 1)  # an attempt this worker does not hold
        extended = store.extend_leases(Database(env.settings.mysql), [first, stale])
        assert extended == Extended(kept=frozenset({first.id}), gone=frozenset({second.id}))
        rows = env.query(
            "SELECT d.seq, TIMESTAMPDIFF(SECOND, NOW(6), d.lease_until) FROM {deliveries} d "
            "JOIN {groups} g ON g.id = d.group_id WHERE g.name = 'audit' ORDER BY d.seq"
        )
    half = env.settings.topics.lease_s / 2  # the kept one has a whole lease left, the stale one 1 s
    assert [(int(s), int(left) > half) for s, left in rows] == [(first.id, True), (second.id, False)]


def test_the_topics_duty_prunes_and_sets_the_gauges(make_env: Any) -> None:
    env = make_env(retention_s=60, groups=groups(billing={"timeout_s": 1}))
    env.publisher.publish_many(Publish("orders", n) for n in range(4))
    env.run_once()
    env.query("UPDATE {messages} SET created_at = created_at - INTERVAL 1 HOUR")
    keeper = TopicKeeper(env.admin, TopicMonitor(env.admin.db, env.settings.topics), env.settings.topics)
    keeper.maintain()
    assert keeper.pruned == 4
    assert env.query("SELECT COUNT(*) FROM {messages}") == [(0,)]
    sample = REGISTRY.get_sample_value
    assert sample("duecast_group_backlog", {"topic": "orders", "group": "billing"}) == 0
    assert sample("duecast_topic_last_id", {"topic": "orders"}) == 4
    # The drained worker's member left: a clean stop is not live at once (issue 16.7), though its
    # heartbeat within member_ttl_s still holds retention, so a restarted process resumes it without a gap.
    assert sample("duecast_group_live_members", {"topic": "orders", "group": "cache"}) == 0
