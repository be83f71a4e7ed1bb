"""Three cluster groups on one topic, real dispatcher and worker processes, and a worker SIGKILLed in
the middle of a group's ack transaction: every group ends with every message's effect exactly once
(transactional consumers), nothing is lost, and the only repeated executions are those of the killed
worker's batch, each counted as an interruption.

Time passes by back-dating the dead worker's leases in SQL, never by waiting a lease out.
"""

from __future__ import annotations

import json
import os
import signal
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pymysql
import pytest

from duecast.shared.api.publish import Publish, Publisher
from duecast.shared.settings import MySQLSettings, RedisSettings, Settings
from duecast.shared.states import State
from duecast.shared.storage.admin import migrate
from duecast.shared.storage.db import Database
from duecast.shared.storage.topic_admin import TopicAdmin
from duecast.shared.storage.topic_status import TopicMonitor
from tests.faults.conftest import _NOT_INHERITED
from tests.faults.procs import Procs, wait_for
from tests.faults.topics_app import GROUPS

pytestmark = pytest.mark.faults

MESSAGES = 600
PARKED = 300  # the message whose billing consumer parks (and is killed) mid-transaction
WAIT_S = 60.0
# A worker serving only the broadcast group "cache" (tests/faults/topics_app.py).
CACHE_WORKER = ["-m", "duecast.worker", "--app", "tests.faults.topics_app", "--source", "topics.orders-cache"]


@pytest.fixture
def make_env(
    mysql_settings: MySQLSettings, redis_settings: RedisSettings, sql: pymysql.cursors.Cursor, tmp_path: Path
) -> Iterator[Callable[..., tuple[Settings, dict[str, str]]]]:
    """make_env(**topics) -> settings for the test, and the environment of its child processes."""
    made: list[Settings] = []
    prefix = f"f{uuid.uuid4().hex[:8]}_"
    effects = f"{prefix}effects"
    sql.execute(f"CREATE TABLE `{effects}` (grp VARCHAR(32), msg BIGINT, attempt INT, pid INT)")

    def make(**overrides: Any) -> tuple[Settings, dict[str, str]]:
        topics = {"table_prefix": prefix, "names": ["orders"], "lease_s": 60, **overrides}
        settings = Settings(
            mysql=mysql_settings,
            redis=redis_settings,
            jobs={"enabled": False},  # type: ignore[arg-type]
            topics=topics,  # type: ignore[arg-type]
        )
        migrate.apply(settings)
        made.append(settings)
        env = {k: v for k, v in os.environ.items() if not k.startswith((*_NOT_INHERITED, "DUECAST_TOPICS"))}
        env.update(
            {
                "DUECAST_MYSQL__DATABASE": mysql_settings.database,
                "DUECAST_REDIS__URL": redis_settings.url.get_secret_value(),
                "DUECAST_REDIS__KEY_PREFIX": redis_settings.key_prefix,
                "DUECAST_JOBS__ENABLED": "false",
                "DUECAST_TOPICS": json.dumps(topics),
                "DUECAST_DISPATCHER__POLL_INTERVAL_S": "0.05",
                "DUECAST_DISPATCHER__SWEEP_INTERVAL_S": "0.2",
                "DUECAST_WORKER__POP_BATCH": "50",
                "DUECAST_WORKER__BLOCK_TIMEOUT_S": "0.5",
                "DUECAST_TEST_EXEC_LOG": str(tmp_path / "exec.log"),
                "DUECAST_TEST_EFFECTS": effects,
                "PYTHONUNBUFFERED": "1",
            }
        )
        return settings, env

    yield make
    tables = [effects]
    for settings in made[:1]:
        tables += [settings.topics.table(k) for k in ("topics", "messages", "groups")]
        tables += [settings.topics.table(k) for k in ("deliveries", "attempts", "members")]
    sql.execute("DROP TABLE IF EXISTS " + ", ".join(f"`{t}`" for t in tables))


def member_positions(sql: pymysql.cursors.Cursor, members: str) -> list[tuple[Any, ...]]:
    """(name, position) of each broadcast member, by name."""
    sql.execute(f"SELECT name, position FROM {members} ORDER BY name")
    return list(sql.fetchall())


def executions(path: Path) -> list[tuple[str, int, int, int, str]]:
    """(group, message id, attempt, pid, member) per execution; whole lines only."""
    if not path.exists():
        return []
    lines = (line.split() for line in path.read_text().splitlines())
    return [(g, int(i), int(a), int(p), m) for g, i, a, p, m in lines]


def test_three_groups_each_apply_every_message_once_across_a_worker_sigkill(
    make_env: Callable[..., tuple[Settings, dict[str, str]]],
    procs: Procs,
    sql: pymysql.cursors.Cursor,
    tmp_path: Path,
) -> None:
    settings, env = make_env(groups=[{"topic": "orders", "name": g, "start": "earliest"} for g in GROUPS])
    effects = env["DUECAST_TEST_EFFECTS"]
    deliveries, groups = (f"`{settings.topics.table(k)}`" for k in ("deliveries", "groups"))

    def query(stmt: str, args: Any = None) -> list[tuple[Any, ...]]:
        sql.execute(stmt, args)
        return list(sql.fetchall())

    publisher = Publisher(settings, None)
    ids = publisher.publish_many(
        Publish("orders", {"park": "billing"} if n == PARKED else {"n": n}) for n in range(1, MESSAGES + 1)
    )
    assert ids == list(range(1, MESSAGES + 1))

    marker, gate = tmp_path / "parked.json", tmp_path / "gate"
    worker_args = ["-m", "duecast.worker", "--app", "tests.faults.topics_app"]
    worker_args += [arg for g in GROUPS for arg in ("--source", f"topics.orders-{g}")]
    procs.spawn("dispatcher", ["-m", "duecast.dispatcher"], env)
    doomed = procs.spawn(
        "worker-a",
        worker_args,
        {**env, "DUECAST_TEST_GATE": str(gate), "DUECAST_TEST_BATCH_MARKER": str(marker)},
    )
    wait_for(marker.exists, WAIT_S, "worker A to park inside billing's ack transaction", procs.check)
    assert json.loads(marker.read_text()) == {"pid": doomed.pid, "group": "billing", "id": PARKED}
    held = query(
        f"SELECT d.seq FROM {deliveries} d JOIN {groups} g ON g.id = d.group_id "
        "WHERE g.name = 'billing' AND d.dc_state = %s AND d.worker LIKE %s",
        (int(State.RUNNING), f"%:{doomed.pid}"),
    )
    assert (PARKED,) in held

    procs.kill(doomed)
    procs.spawn("worker-b", worker_args, env)
    # Time passes for the dead worker's leases only: the sweeper counts them as interrupted.
    query(
        f"UPDATE {deliveries} SET lease_until = NOW(6) - INTERVAL 1 SECOND "
        "WHERE dc_state = %s AND worker LIKE %s",
        (int(State.RUNNING), f"%:{doomed.pid}"),
    )
    wait_for(
        lambda: query(f"SELECT COUNT(*) FROM `{effects}`")[0][0] >= MESSAGES * len(GROUPS),
        WAIT_S,
        "every group to apply every message",
        procs.check,
    )
    wait_for(
        lambda: (
            query(f"SELECT COUNT(*) FROM {deliveries} WHERE dc_state <> %s", (int(State.DONE),)) == [(0,)]
        ),
        WAIT_S,
        "every delivery to be done",
        procs.check,
    )

    # The effects: exactly once per (group, message), nothing lost.
    applied = Counter((str(g), int(m)) for g, m in query(f"SELECT grp, msg FROM `{effects}`"))
    assert applied == Counter({(g, i): 1 for g in GROUPS for i in ids})
    # The executions: at least once each; repeats only for billing's killed batch, by worker A first.
    runs = executions(Path(env["DUECAST_TEST_EXEC_LOG"]))
    counts = Counter((g, i) for g, i, *_ in runs)
    assert set(counts) == {(g, i) for g in GROUPS for i in ids}
    repeated = {key for key, n in counts.items() if n > 1}
    killed_batch = {int(s) for (s,) in held}
    assert ("billing", PARKED) in repeated
    assert repeated <= {("billing", i) for i in killed_batch}
    assert all(n == 2 for key, n in counts.items() if key in repeated)
    interrupted = query(
        f"SELECT d.seq FROM {deliveries} d JOIN {groups} g ON g.id = d.group_id "
        "WHERE g.name = 'billing' AND d.interruptions = 1"
    )
    assert {int(s) for (s,) in interrupted} == killed_batch
    trace = TopicAdmin(Database(settings.mysql), settings.topics).trace("orders", PARKED)
    assert [(a["attempt"], a["outcome"]) for a in trace["billing"]["attempts"]] == [(1, "interrupted")]
    assert str(trace["billing"]["attempts"][0]["worker"]).endswith(f":{doomed.pid}")
    # The suspects (interrupted once) ran again in groups of the same batch, each dispatched once
    # more: no other interruption was recorded, and no entry was released to be claimed again.
    assert trace["billing"]["delivery"]["dc_attempt"] == 2


def test_a_sigkilled_broadcast_member_resumes_from_its_last_position_and_the_others_see_everything(
    make_env: Callable[..., tuple[Settings, dict[str, str]]],
    procs: Procs,
    sql: pymysql.cursors.Cursor,
    tmp_path: Path,
) -> None:
    settings, env = make_env(
        groups=[{"topic": "orders", "name": "cache", "mode": "broadcast", "start": "earliest"}],
        read_batch=50,
        member_ttl_s=3,
    )
    members = f"`{settings.topics.table('members')}`"
    marker, gate = tmp_path / "parked.json", tmp_path / "gate"
    worker_args = CACHE_WORKER
    for name in ("m1", "m3"):
        procs.spawn(name, worker_args, {**env, "DUECAST_TOPICS__MEMBER": name})
    doomed = procs.spawn(
        "m2",
        worker_args,
        {
            **env,
            "DUECAST_TOPICS__MEMBER": "m2",
            "DUECAST_TEST_GATE": str(gate),
            "DUECAST_TEST_BATCH_MARKER": str(marker),
        },
    )
    ids = Publisher(settings, None).publish_many(
        Publish("orders", {"park": "cache"} if n == PARKED // 2 else {"n": n})
        for n in range(1, MESSAGES // 2 + 1)
    )
    wait_for(marker.exists, WAIT_S, "member m2 to park in the middle of a batch", procs.check)

    def positions() -> list[tuple[Any, ...]]:
        return member_positions(sql, members)

    assert ("m2", 100) in positions()  # batches of 50: the parked batch (101..150) is not committed

    procs.kill(doomed)
    # Time passes for the dead member's heartbeat only: a new process may take it over.
    sql.execute(f"UPDATE {members} SET heartbeat_at = NOW(6) - INTERVAL 1 HOUR WHERE name = 'm2'")
    again = procs.spawn("m2-again", worker_args, {**env, "DUECAST_TOPICS__MEMBER": "m2"})

    wait_for(
        lambda: positions() == [(m, ids[-1]) for m in ("m1", "m2", "m3")], WAIT_S, "every member", procs.check
    )
    runs = executions(Path(env["DUECAST_TEST_EXEC_LOG"]))
    for name in ("m1", "m3"):
        assert [i for _, i, _, _, m in runs if m == name] == ids, name
    by_m2 = [(i, p) for _, i, _, p, m in runs if m == "m2"]
    killed = [i for i, p in by_m2 if p == doomed.pid]
    assert killed == ids[:150]  # ran up to the parked message, then died
    assert [i for i, p in by_m2 if p == again.pid] == ids[100:]  # resumed from its committed position


def test_a_broadcast_member_stopped_with_sigterm_is_not_live_at_once(
    make_env: Callable[..., tuple[Settings, dict[str, str]]],
    procs: Procs,
    sql: pymysql.cursors.Cursor,
) -> None:
    """Issue 16.7: a member stopped cleanly hands its row back on the way out, so status shows it
    gone at once, not member_ttl_s (60 s) later; its last heartbeat still holds retention."""
    settings, env = make_env(
        groups=[{"topic": "orders", "name": "cache", "mode": "broadcast", "start": "earliest"}]
    )
    worker_args = CACHE_WORKER
    member = procs.spawn("m1", worker_args, {**env, "DUECAST_TOPICS__MEMBER": "m1"})
    monitor = TopicMonitor(Database(settings.mysql), settings.topics)

    def members() -> list[Any]:
        return [m for g in monitor.groups() for m in g.members]  # none until the member joins

    wait_for(lambda: [m.live for m in members()] == [True], WAIT_S, "member m1 to join", procs.check)
    procs.signal(member, signal.SIGTERM)
    assert procs.wait_exit(member, WAIT_S) == 0
    stopped = time.monotonic()
    (after,) = monitor.groups()
    assert [(m.name, m.owner, m.live) for m in after.members] == [("m1", None, False)]
    assert time.monotonic() - stopped < settings.topics.member_ttl_s
    assert after.finished_through == after.members[0].position  # still holds retention for its TTL


def test_each_of_processes_n_is_a_broadcast_member_of_its_own_and_reads_every_message(
    make_env: Callable[..., tuple[Settings, dict[str, str]]],
    procs: Procs,
    sql: pymysql.cursors.Cursor,
) -> None:
    """`duecast worker --processes 2` with topics.member "hb": the children are members "hb-0" and
    "hb-1", each runs the consumer for every message (a local cache in each process is evicted),
    rather than one member's row shared, and so one process's cache never told."""
    settings, env = make_env(
        groups=[{"topic": "orders", "name": "cache", "mode": "broadcast", "start": "earliest"}], read_batch=50
    )
    members = f"`{settings.topics.table('members')}`"
    worker_args = CACHE_WORKER
    parent = procs.spawn("hb", [*worker_args, "--processes", "2"], {**env, "DUECAST_TOPICS__MEMBER": "hb"})
    ids = Publisher(settings, None).publish_many(Publish("orders", {"n": n}) for n in range(120))

    def positions() -> list[tuple[Any, ...]]:
        return member_positions(sql, members)

    wait_for(
        lambda: positions() == [("hb-0", ids[-1]), ("hb-1", ids[-1])], WAIT_S, "both members", procs.check
    )
    runs = executions(Path(env["DUECAST_TEST_EXEC_LOG"]))
    by_pid: dict[int, list[int]] = {}
    for _, i, _, pid, _ in runs:
        by_pid.setdefault(pid, []).append(i)
    assert len(by_pid) == 2
    assert parent.pid not in by_pid
    assert all(sorted(seen) == ids for seen in by_pid.values())
    procs.signal(parent, signal.SIGTERM)
    assert procs.wait_exit(parent, WAIT_S) == 0
