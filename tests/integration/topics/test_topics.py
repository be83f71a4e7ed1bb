"""Topics and consumer groups on real MariaDB + Redis, with the real dispatcher and worker loops run
in-process (drain mode): publishing, cluster groups (once per group, stepped retries, dead letters),
broadcast members, start positions, replay, trace, retention and status.

Time passes by back-dating run_at / created_at / lease_until in SQL, never by sleeping.
"""

from __future__ import annotations

import os
import threading
import uuid
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pymysql
import pytest
from prometheus_client import REGISTRY

from duecast.admin import migrate
from duecast.dispatcher.main import serve as serve_dispatcher
from duecast.dispatcher.topics import TopicKeeper
from duecast.shared.api.handlers import load_registry
from duecast.shared.api.publish import Publish, Publisher, PublishError
from duecast.shared.fanout.keys import Entry
from duecast.shared.fanout.queue import connect_redis
from duecast.shared.monitor.topic_status import TopicMonitor
from duecast.shared.process.runtime import build_stores
from duecast.shared.settings import MySQLSettings, RedisSettings, Settings, TopicsSettings
from duecast.shared.states import State
from duecast.shared.storage.db import Database, connect
from duecast.shared.storage.leased.keeper import Extended
from duecast.shared.storage.topic_admin import TopicAdmin
from duecast.worker.broadcast import BroadcastMember, running
from duecast.worker.main import serve as serve_worker
from duecast.worker.member_store import MemberStore, member_name
from tests.integration import topics_app
from tests.integration.polling import wait_until

pytestmark = pytest.mark.integration
APP = "tests.integration.topics_app"
CLUSTER = ("billing", "shipping", "audit")


def groups(**overrides: dict[str, Any]) -> list[dict[str, Any]]:
    base: dict[str, dict[str, Any]] = {
        "billing": {"max_retries": 3},
        "shipping": {},
        "audit": {},
        "cache": {"mode": "broadcast"},
    }
    out = [{"topic": "orders", "name": n, "start": "earliest", **f} for n, f in {**base, **overrides}.items()]
    return [*out, {"topic": "ledger", "name": "books", "start": "earliest"}]


class TopicsEnv:
    def __init__(self, settings: Settings, sql: pymysql.cursors.Cursor) -> None:
        self.settings = settings
        self.sql = sql
        self.publisher = Publisher(settings, connect_redis(settings.redis))
        self.admin = TopicAdmin(Database(settings.mysql), settings.topics)
        self.monitor = TopicMonitor(Database(settings.mysql), settings.topics)

    def table(self, kind: str) -> str:
        return f"`{self.settings.topics.table(kind)}`"

    def run_once(self) -> None:
        """One dispatch and one worker drain: every due delivery runs (at most) once."""
        serve_dispatcher(self.settings, threading.Event(), drain=True)
        serve_worker(self.settings, threading.Event(), drain=True)

    def query(self, stmt: str, args: Any = None) -> list[tuple[Any, ...]]:
        self.sql.execute(
            stmt.format(**{k: self.table(k) for k in ("messages", "deliveries", "groups")}), args
        )
        return list(self.sql.fetchall())

    def deliveries(self, group: str) -> dict[int, tuple[int, int, int]]:
        """message id -> (state, errors, attempt) of `group`'s deliveries."""
        rows = self.query(
            "SELECT d.seq, d.dc_state, d.errors, d.dc_attempt FROM {deliveries} d "
            "JOIN {groups} g ON g.id = d.group_id WHERE g.name = %s",
            (group,),
        )
        return {int(s): (int(st), int(e), int(a)) for s, st, e, a in rows}

    def make_due(self) -> None:
        """Time passes: every pending delivery is due now."""
        self.query("UPDATE {deliveries} SET run_at = NOW(6) WHERE dc_state = %s", (int(State.IDLE),))


@pytest.fixture
def make_env(
    mysql_settings: MySQLSettings, redis_settings: RedisSettings, sql: pymysql.cursors.Cursor
) -> Iterator[Any]:
    made: list[TopicsEnv] = []

    def make(**topics: Any) -> TopicsEnv:
        prefix = f"t{uuid.uuid4().hex[:8]}_"
        settings = Settings(
            mysql=mysql_settings,
            redis=redis_settings,
            jobs={"enabled": False},  # type: ignore[arg-type]
            topics={  # type: ignore[arg-type]
                "table_prefix": prefix,
                "names": ["orders", "ledger"],
                "groups": groups(),
                "retry_delays_s": [10, 30, 60],
                **topics,
            },
            worker={"app": APP, "block_timeout_s": 0.1, "error_backoff_s": 0.05},  # type: ignore[arg-type]
            dispatcher={"poll_interval_s": 0.05},  # type: ignore[arg-type]
        )
        migrate.apply(settings)
        env = TopicsEnv(settings, sql)
        made.append(env)
        return env

    topics_app.RUNS.clear()
    yield make
    for env in made:
        env.publisher.db.close()
        for kind in ("topics", "messages", "groups", "deliveries", "attempts", "members"):
            sql.execute(f"DROP TABLE IF EXISTS {env.table(kind)}")


@pytest.fixture
def env(make_env: Any) -> TopicsEnv:
    return make_env()  # type: ignore[no-any-return]


# ---------------------------------------------------------------- publishing


def test_publish_many_assigns_gap_free_ids_in_order_and_returns_them(env: TopicsEnv) -> None:
    ids = env.publisher.publish_many(Publish("orders", {"n": n}, key=f"o:{n}") for n in range(1200))
    assert ids == list(range(1, 1201))
    assert env.publisher.publish("orders", {"n": "next"}) == 1201
    rows = env.query("SELECT seq, msg_key, payload FROM {messages} ORDER BY seq")
    assert [int(r[0]) for r in rows] == list(range(1, 1202))
    assert rows[41][1:] == ("o:41", '{"n":41}')


def test_a_bad_message_fails_the_whole_batch_before_anything_is_written(env: TopicsEnv) -> None:
    good = [Publish("orders", {"n": n}) for n in range(10)]
    for bad, why in (
        (Publish("nope", 1), "unknown topic"),
        (Publish("orders", float("nan")), "not JSON"),
        (Publish("orders", {"x": object()}), "not JSON"),
        (Publish("orders", "x" * 70_000), "limit"),
        (Publish("orders", 1, key=""), "key"),
    ):
        with pytest.raises(PublishError, match=why):
            env.publisher.publish_many([*good, bad])
    assert env.query("SELECT COUNT(*) FROM {messages}") == [(0,)]


def publish_then_fail(env: TopicsEnv, conn: pymysql.Connection[pymysql.cursors.Cursor]) -> None:
    with env.publisher.transaction(conn):
        env.publisher.publish_many([Publish("orders", n) for n in range(5)], conn=conn)
        raise RuntimeError("the caller's own work failed")


def test_messages_published_in_a_rolled_back_transaction_never_existed(env: TopicsEnv) -> None:
    conn = connect(env.settings.mysql)
    try:
        with pytest.raises(RuntimeError, match="own work"):
            publish_then_fail(env, conn)
        with env.publisher.transaction(conn):
            ids = env.publisher.publish_many([Publish("orders", n) for n in range(3)], conn=conn)
    finally:
        conn.close()
    # The rolled-back ids were never used: the next commit got 1..3, so positions never skip a hole.
    assert ids == [1, 2, 3]
    assert env.query("SELECT seq, payload FROM {messages} ORDER BY seq") == [(1, "0"), (2, "1"), (3, "2")]


# ---------------------------------------------------------------- cluster and broadcast groups


def test_every_group_handles_every_message_once(env: TopicsEnv) -> None:
    ids = env.publisher.publish_many(Publish("orders", {"n": n}) for n in range(300))
    env.run_once()
    for group in (*CLUSTER, "cache"):
        assert Counter(topics_app.runs(group)) == Counter(ids), group
    for group in CLUSTER:
        assert set(env.deliveries(group).values()) == {(int(State.DONE), 0, 1)}
    env.run_once()  # nothing new: nothing runs again
    assert len(topics_app.RUNS) == 4 * 300


def test_a_message_that_always_fails_is_dead_in_its_group_after_exactly_max_retries(env: TopicsEnv) -> None:
    bad = env.publisher.publish("orders", {"fail": ["billing"]})
    env.run_once()
    for group in ("shipping", "audit"):  # the other groups complete it at once
        assert env.deliveries(group)[bad] == (int(State.DONE), 0, 1)
    assert topics_app.runs("cache") == [bad]

    delays = []
    for retry in range(1, 4):  # billing's max_retries = 3; retry_delays_s = [10, 30, 60]
        ((state, errors, wait_s),) = env.query(
            "SELECT d.dc_state, d.errors, TIMESTAMPDIFF(MICROSECOND, NOW(6), d.run_at) / 1e6 "
            "FROM {deliveries} d JOIN {groups} g ON g.id = d.group_id WHERE g.name = 'billing'"
        )
        assert (state, errors) == (int(State.IDLE), retry)
        delays.append(float(wait_s))
        env.run_once()
        assert topics_app.runs("billing").count(bad) == retry  # not due yet: the step holds
        env.make_due()
        env.run_once()
    assert [round(d) for d in delays] == [10, 30, 60]

    assert topics_app.runs("billing").count(bad) == 4  # the first run and exactly 3 retries
    state, errors, attempt = env.deliveries("billing")[bad]
    assert (state, errors, attempt) == (int(State.DEAD), 4, 4)
    trace = env.admin.trace("orders", bad)["billing"]
    assert "cannot take message" in trace["delivery"]["last_error"]
    assert [(a["attempt"], a["outcome"]) for a in trace["attempts"]] == [(n, "failed") for n in (1, 2, 3, 4)]
    env.make_due()
    env.run_once()
    assert topics_app.runs("billing").count(bad) == 4  # dead stays dead
    assert all(topics_app.runs(g) == [bad] for g in ("shipping", "audit", "cache"))
    assert [s.dead for s in env.monitor.groups() if s.group == "billing"] == [1]


def test_replaying_one_group_from_a_time_redelivers_to_it_only(env: TopicsEnv) -> None:
    early = env.publisher.publish_many(Publish("orders", n) for n in range(5))
    env.query("UPDATE {messages} SET created_at = created_at - INTERVAL 1 HOUR")
    late = env.publisher.publish_many(Publish("orders", n) for n in range(5, 10))
    env.run_once()
    assert all(topics_app.runs(g) == early + late for g in (*CLUSTER, "cache"))
    before = {g: env.deliveries(g) for g in ("shipping", "audit")}

    ((cut,),) = env.query(
        "SELECT DATE_FORMAT(UTC_TIMESTAMP(6) - INTERVAL 30 MINUTE, '%Y-%m-%dT%H:%i:%s+00:00')"
    )
    reset = env.admin.reset(env.settings.topics.group("orders", "billing"), cut)
    assert (reset.old_position, reset.new_position, reset.replayed) == (10, 5, 5)
    topics_app.RUNS.clear()
    env.run_once()

    assert topics_app.runs("billing") == late
    assert all(topics_app.runs(g) == [] for g in ("shipping", "audit", "cache"))
    assert {g: env.deliveries(g) for g in ("shipping", "audit")} == before
    billing = env.deliveries("billing")
    assert all(billing[i] == (int(State.DONE), 0, 1) for i in early)
    assert all(billing[i] == (int(State.DONE), 0, 2) for i in late)  # a second attempt, done
    trace = env.admin.trace("orders", late[0])["billing"]
    assert trace["delivery"]["replays"] == 1
    assert [(a["attempt"], a["outcome"]) for a in trace["attempts"]] == [(1, "done")]


def test_replaying_a_broadcast_group_moves_its_members_back(env: TopicsEnv) -> None:
    ids = env.publisher.publish_many(Publish("orders", n) for n in range(6))
    env.run_once()
    reset = env.admin.reset(env.settings.topics.group("orders", "cache"), str(ids[3]))
    assert (reset.new_position, reset.replayed) == (ids[2], 1)
    topics_app.RUNS.clear()
    env.run_once()
    assert topics_app.runs("cache") == ids[3:]
    assert all(topics_app.runs(g) == [] for g in CLUSTER)


def test_a_broadcast_groups_three_live_members_each_see_every_message(env: TopicsEnv) -> None:
    group = env.settings.topics.group("orders", "cache")
    handler = load_registry(APP).handler(group.source)
    members = []
    for name in ("m1", "m2", "m3"):
        store = MemberStore(Database(env.settings.mysql), env.settings.topics, group, name)
        store.verify()
        members.append(BroadcastMember(store, handler, env.settings.topics))
    stop = threading.Event()
    ids: list[int] = []
    with running(members, stop, drain=False):
        for batch in range(4):  # published while the members run
            ids += env.publisher.publish_many(Publish("orders", {"b": batch, "n": n}) for n in range(50))

        def caught_up() -> bool:
            rows = env.query("SELECT name, position FROM `{}`".format(env.settings.topics.table("members")))
            return sorted(rows) == [(m, ids[-1]) for m in ("m1", "m2", "m3")]

        wait_until(caught_up, "every member to reach the last message")
        live = {s.group: s for s in env.monitor.groups()}["cache"].members
        assert [(m.name, m.live) for m in live] == [(n, True) for n in ("m1", "m2", "m3")]
    for m in members:
        seen = [r.id for r in topics_app.RUNS if r.group == "cache" and r.thread == m.name]
        assert seen == ids, m.name  # each member: every message, once, in order
    statuses = {s.group: s for s in env.monitor.groups()}
    # The members handed themselves back on the way out (a clean stop: what SIGTERM does): none
    # holds its row any more, and none shows as live, at once rather than after member_ttl_s.
    assert [(m.name, m.owner, m.handled, m.live) for m in statuses["cache"].members] == [
        (n, None, 200, False) for n in ("m1", "m2", "m3")
    ]
    # Their heartbeats are recent, so they still hold retention: a restart resumes without a gap.
    assert statuses["cache"].finished_through == ids[-1]


def test_a_group_added_later_starts_from_its_chosen_position(make_env: Any) -> None:
    env = make_env()
    ids = env.publisher.publish_many(Publish("orders", n) for n in range(10))
    env.query("UPDATE {messages} SET created_at = created_at - INTERVAL 1 HOUR WHERE seq <= 4")
    env.query("DELETE FROM {messages} WHERE seq = 1")  # retention took the oldest one already
    ((cut,),) = env.query(
        "SELECT DATE_FORMAT(UTC_TIMESTAMP(6) - INTERVAL 30 MINUTE, '%Y-%m-%dT%H:%i:%s+00:00')"
    )
    later = {
        "late_latest": "latest",
        "late_earliest": "earliest",
        "late_id": "7",
        "late_time": cut,
        "late_one": "1",
    }
    topics = env.settings.topics.model_dump()
    topics["groups"] += groups_from(later)
    settings = env.settings.model_copy(update={"topics": TopicsSettings.model_validate(topics)})
    firsts = {}
    for store in build_stores(settings, settings.topics.group_sources()):
        if store.src.name.split("-", 1)[1] in later:
            entries = store.claim_due(100)
            firsts[store.src.name.split("-", 1)[1]] = [e.id for e in entries]
    env.publisher.publish("orders", "new")
    assert firsts == {
        "late_latest": [],
        "late_earliest": ids[1:],
        "late_id": ids[6:],
        "late_time": ids[4:],
        "late_one": ids[1:],  # message 1 was gone: skipped, and reported, not silently
    }
    skipped = {s.group: s.skipped for s in TopicMonitor(Database(settings.mysql), settings.topics).groups()}
    assert skipped["late_one"] == 1
    assert skipped["late_earliest"] == 0


def groups_from(starts: dict[str, str]) -> list[dict[str, Any]]:
    return [{"topic": "orders", "name": n, "start": s} for n, s in starts.items()]


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
