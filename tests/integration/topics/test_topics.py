"""Topics on real MariaDB + Redis, each role run once in-process (drain mode): publishing and
cluster groups (once per group, stepped retries, dead letters), broadcast members, start positions and replay.

Time passes by back-dating run_at / created_at / lease_until in SQL, never by sleeping.
"""

from __future__ import annotations

import threading
from collections import Counter
from typing import Any

import pytest

from duecast.shared.api.app import load_registry
from duecast.shared.api.publish import Publish, PublishError
from duecast.shared.process.runtime import build_stores
from duecast.shared.settings import TopicsSettings
from duecast.shared.states import State
from duecast.shared.storage.db import Database, connect
from duecast.shared.storage.member_store import MemberStore
from duecast.shared.storage.topic_status import TopicMonitor
from duecast.worker.broadcast import BroadcastMember, running
from tests.integration import topics_app
from tests.integration.polling import wait_until
from tests.integration.topics.topics_env import APP, CLUSTER, TopicsEnv

pytestmark = pytest.mark.integration


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


def test_messages_published_in_a_rolled_back_transaction_never_existed(env: TopicsEnv) -> None:
    conn = connect(env.settings.mysql)
    try:
        env.publisher.publish_many([Publish("orders", n) for n in range(5)], conn=conn)
        conn.rollback()  # the caller's own work failed
        ids = env.publisher.publish_many([Publish("orders", n) for n in range(3)], conn=conn)
        assert env.query("SELECT COUNT(*) FROM {messages}") == [(0,)]  # not committed by duecast
        conn.commit()
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
