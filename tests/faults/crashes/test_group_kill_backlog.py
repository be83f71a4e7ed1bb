"""Issue 24.6: a worker of a cluster group SIGKILLed while it holds a batch, with a 10,000-message
backlog queued behind it, at the default lease (15 s), sweep interval and visibility timeout (60 s).
The killed worker's deliveries come back at its leases' end (the "interrupted" cause runs ten times
a lease) and the dispatcher pushes them ahead of the backlog, so each is applied again within about
the lease of the kill; before item 6 they queued behind the backlog (59.5 s and 68.3 s measured).
Under `--supervise` the supervisor hands them back the moment the child dies: a restart, not a lease.

Measured: for each message the killed worker held, the time from the kill to its ack (a trigger
records every ack with the database's NOW(6)). Nothing is back-dated: the lease and the sweep run in
real time, which is what is measured. The consumer takes 20 ms a message, so two workers get
through ~100 a second and the backlog stays queued for the whole recovery; once it is measured, two
fast workers drain it, so that every message can be checked: 0 lost, none acked twice, and no
(id, attempt) executed twice (the consumer's own execution log).

Worker batches are 50 (worker.pop_batch; the default 2,000 would make one batch 40 s of consumer
time, and the recovery then the survivor's time to run it, not the lease and the push-ahead).
"""

from __future__ import annotations

import json
import os
import signal
import statistics
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pymysql
import pytest

from duecast.shared.api.publish import Publish, Publisher
from duecast.shared.settings import MySQLSettings, RedisSettings, Settings
from duecast.shared.states import State
from duecast.shared.storage.admin import migrate
from tests.faults.conftest import _NOT_INHERITED
from tests.faults.procs import Procs, wait_for

pytestmark = pytest.mark.faults

BACKLOG = 10_000
POP_BATCH = 50
TOTAL = BACKLOG + 4 * POP_BATCH  # the doomed worker's batch, and what the survivor runs before the kill
CONSUME_S = 0.02
# Issue 24's acceptance: a group's kill with a 10,000 backlog, its work done again within 20 s. The
# budget: the leases' remainder at the kill (10-15 s: a live worker renews them every lease_s / 3),
# the "interrupted" cause (every lease_s / 10 = 1.5 s), the dispatcher's next claim (0.2 s) pushing
# them first, and the survivor's current batch and theirs (about 1 s each at 20 ms a message).
LEASE_BOUND_S = 20.0
SUPERVISED_BOUND_S = 5.0  # a restart: waitpid, the hand-back, the next claim, a batch
WAIT_S = 60.0
APP = ["--app", "tests.faults.backlog_app", "--source", "topics.orders-slow"]
# The sweep requeuing the dead worker's rows may meet the survivor's starts: InnoDB may pick it as a
# deadlock victim, which its loop retries at once (one WARNING line).
SWEEP_MEETS_STARTS = ("TransientError",)


@pytest.fixture
def group_env(
    mysql_settings: MySQLSettings, redis_settings: RedisSettings, sql: pymysql.cursors.Cursor, tmp_path: Path
) -> Iterator[tuple[Settings, dict[str, str]]]:
    """Topic "orders", cluster group "slow", every topics setting at its default but the tables'
    prefix; an acks table a trigger fills with (seq, attempt, time) on each delivery's ack."""
    prefix = f"f{uuid.uuid4().hex[:8]}_"
    group = {"topic": "orders", "name": "slow", "start": "earliest"}
    topics = {"table_prefix": prefix, "names": ["orders"], "groups": [group]}
    settings = Settings(
        mysql=mysql_settings,
        redis=redis_settings,
        jobs={"enabled": False},  # type: ignore[arg-type]
        topics=topics,  # type: ignore[arg-type]
    )
    assert (settings.topics.lease_s, settings.topics.visibility_timeout_s) == (15.0, 60.0)
    migrate.apply(settings)
    deliveries, acks = settings.topics.table("deliveries"), f"{prefix}acks"
    sql.execute(f"CREATE TABLE `{acks}` (seq BIGINT NOT NULL, attempt INT NOT NULL, at DATETIME(6) NOT NULL)")
    sql.execute(
        f"CREATE TRIGGER `{acks}_t` AFTER UPDATE ON `{deliveries}` FOR EACH ROW "
        f"INSERT INTO `{acks}` SELECT NEW.seq, NEW.dc_attempt, NOW(6) FROM DUAL "
        f"WHERE NEW.dc_state = {int(State.DONE)} AND OLD.dc_state <> {int(State.DONE)}"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith((*_NOT_INHERITED, "DUECAST_TOPICS"))}
    env.update(
        {
            "DUECAST_MYSQL__DATABASE": mysql_settings.database,
            "DUECAST_REDIS__URL": redis_settings.url.get_secret_value(),
            # Its own prefix: the group's ready list holds this test's backlog only.
            "DUECAST_REDIS__KEY_PREFIX": f"{redis_settings.key_prefix}-{uuid.uuid4().hex[:6]}",
            "DUECAST_JOBS__ENABLED": "false",
            "DUECAST_TOPICS": json.dumps(topics),
            "DUECAST_WORKER__POP_BATCH": str(POP_BATCH),
            "DUECAST_TEST_CONSUME_S": str(CONSUME_S),
            "DUECAST_TEST_EXEC_LOG": str(tmp_path / "exec.log"),
            "DUECAST_TEST_ACKS": acks,
            "PYTHONUNBUFFERED": "1",
        }
    )
    yield settings, env
    tables = [acks] + [settings.topics.table(k) for k in ("topics", "messages", "groups")]
    tables += [settings.topics.table(k) for k in ("deliveries", "attempts", "members")]
    sql.execute("DROP TABLE IF EXISTS " + ", ".join(f"`{t}`" for t in tables))


def executions(path: Path) -> Counter[tuple[int, int]]:
    """How many times each (message id, attempt) ran, from the consumer's own log."""
    lines = (line.split() for line in path.read_text().splitlines())
    return Counter((int(i), int(a)) for _, i, a, _ in lines)


@pytest.mark.parametrize("supervise", [False, True], ids=["unsupervised", "supervised"])
def test_a_killed_workers_messages_are_applied_again_ahead_of_a_10000_backlog(
    group_env: tuple[Settings, dict[str, str]],
    procs: Procs,
    sql: pymysql.cursors.Cursor,
    tmp_path: Path,
    supervise: bool,
) -> None:
    settings, env = group_env
    deliveries, acks = f"`{settings.topics.table('deliveries')}`", f"`{env['DUECAST_TEST_ACKS']}`"

    def query(stmt: str, args: Any = None) -> list[tuple[Any, ...]]:
        sql.execute(stmt, args)
        return list(sql.fetchall())

    ids = Publisher(settings, None).publish_many(
        Publish("orders", {"park": True} if n == 1 else {"n": n}) for n in range(1, TOTAL + 1)
    )
    assert ids == list(range(1, TOTAL + 1))
    dispatcher = procs.spawn("dispatcher", ["-m", "duecast.dispatcher"], env, allow=SWEEP_MEETS_STARTS)
    # The sweeps are the leader's: a lease left by another test's dispatcher must not be timed.
    wait_for(
        lambda: any(
            f":{dispatcher.pid}:" in str(h)
            for (h,) in query("SELECT holder FROM duecast_leases WHERE expires_at > NOW(6)")
        ),
        WAIT_S,
        "the dispatcher to lead",
        procs.check,
    )
    marker, gate = tmp_path / "parked.json", tmp_path / "gate"
    worker = ["-m", "duecast.worker", *(["--supervise"] if supervise else []), *APP]
    doomed = procs.spawn(
        "doomed", worker, {**env, "DUECAST_TEST_GATE": str(gate), "DUECAST_TEST_BATCH_MARKER": str(marker)}
    )
    wait_for(marker.exists, WAIT_S, "the first worker to park in its first batch", procs.check)
    parked = json.loads(marker.read_text())
    victim = int(parked["pid"])  # the worker itself, or the supervisor's child
    assert parked["id"] == 1
    procs.spawn("survivor", worker[:2] + APP, env)
    wait_for(
        lambda: query(f"SELECT COUNT(*) FROM {acks}")[0][0] >= POP_BATCH,
        WAIT_S,
        "the second worker to get going",
        procs.check,
    )
    running = int(State.RUNNING)
    held = {
        int(s)
        for (s,) in query(
            f"SELECT seq FROM {deliveries} WHERE dc_state = %s AND worker LIKE %s", (running, f"%:{victim}")
        )
    }
    assert 1 in held
    unapplied = TOTAL - query(f"SELECT COUNT(*) FROM {acks}")[0][0]
    assert unapplied - len(held) >= BACKLOG  # queued behind the held batch, in Redis or still in MySQL

    ((killed_at, lease_left_s),) = query(
        f"SELECT NOW(6), TIMESTAMPDIFF(MICROSECOND, NOW(6), MAX(lease_until)) / 1e6 FROM {deliveries} "
        "WHERE dc_state = %s AND worker LIKE %s",
        (running, f"%:{victim}"),
    )
    if supervise:
        os.kill(victim, signal.SIGKILL)  # the child: the supervisor sees it exit, hands back, restarts
    else:
        assert victim == doomed.pid
        procs.kill(doomed)
    gate.touch()  # a parked consumer returns at once from now on
    wait_for(
        lambda: query(f"SELECT COUNT(*) FROM {acks} WHERE attempt > 1")[0][0] >= len(held),
        WAIT_S,
        "every message the killed worker held to be applied again",
        procs.check,
    )
    after = [
        float(s) / 1e6
        for (s,) in query(
            f"SELECT TIMESTAMPDIFF(MICROSECOND, %s, at) FROM {acks} WHERE attempt > 1 ORDER BY at",
            (killed_at,),
        )
    ]
    ((behind,),) = query(
        f"SELECT %s - COUNT(*) FROM {acks} WHERE at <= (SELECT MAX(at) FROM {acks} WHERE attempt > 1)",
        (TOTAL,),
    )
    label = "supervised" if supervise else "unsupervised"
    print(
        f"\n{label}: {len(held)} held messages applied again {statistics.median(after):.1f}s (median), "
        f"{max(after):.1f}s (max) after the kill (their leases ran out {float(lease_left_s):.1f}s after it), "
        f"{behind} messages still queued behind them"
    )

    # The rest of the backlog, fast, so that every message can be checked.
    fast = {**env, "DUECAST_TEST_CONSUME_S": "0"}
    for name in ("drain-1", "drain-2"):
        procs.spawn(name, worker[:2] + APP, fast)
    wait_for(
        lambda: (
            query(f"SELECT COUNT(*) FROM {deliveries} WHERE dc_state <> %s", (int(State.DONE),)) == [(0,)]
        ),
        WAIT_S,
        "every message to be applied",
        procs.check,
    )

    # 0 lost, 0 acked twice: one ack per message; the held ones under their second attempt.
    acked = query(f"SELECT seq, attempt FROM {acks}")
    assert Counter(int(s) for s, _ in acked) == Counter(ids)
    assert {int(s) for s, a in acked if a > 1} == held
    assert query(f"SELECT seq FROM {deliveries} WHERE interruptions > 0") == [(s,) for s in sorted(held)]
    # No (id, attempt) executed twice; each held message ran at most once under attempt 1 (the parked
    # one did, its batch-mates waited behind it), and every message ran.
    runs = executions(Path(env["DUECAST_TEST_EXEC_LOG"]))
    assert max(runs.values()) == 1
    assert {i for i, _ in runs} == set(ids)
    assert len(after) == len(held)
    assert behind >= BACKLOG // 2  # ahead of the backlog: most of it still queued when the last one landed
    assert max(after) <= (SUPERVISED_BOUND_S if supervise else LEASE_BOUND_S)
