"""Redis HA under load (issue 24.10), on private servers: a Sentinel-managed master losing its process or
handing over by `SENTINEL FAILOVER`, and a Redis Cluster losing the master of duecast's slot (every key
of a prefix shares the hash tag {prefix}). Real dispatcher and worker processes run a re-scan source
and a job queue through it: nothing is lost, no (id, attempt) runs twice, and fresh work (a row due
first and a job of the first priority, added at the fault) runs within RECOVER_S of the fault. Each
measured recovery is printed (`-s` shows it); docs/reliability.md's table quotes them.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pymysql
import pytest
import redis

from duecast.shared.api.enqueue import Enqueuer, Job
from duecast.shared.settings import MySQLSettings, RedisSettings, Settings
from duecast.shared.states import State
from duecast.shared.storage.admin import migrate
from tests.faults.checker import classify, read_log
from tests.faults.conftest import REDIS_DOWN, FaultEnv
from tests.faults.env import RESCAN_PERIOD_S
from tests.faults.procs import Procs, wait_for
from tests.faults.redis_ha import Cluster, Sentinel, Servers
from tests.faults.runs import drop_job_tables
from tests.faults.servers.ha_app import JOBS

pytestmark = pytest.mark.faults

APP = "tests.faults.servers.ha_app"
ROWS = 1500
JOB_COUNT = 600
FRESH_ROW = 10**6  # a row due before every other one: claimed first once Redis takes pushes again
RECOVER_S = 20.0
TIMING = (
    "DUECAST_WORKER__ERROR_BACKOFF_S",
    "DUECAST_DISPATCHER__POLL_INTERVAL_S",
    "DUECAST_DISPATCHER__SWEEP_INTERVAL_S",
)
WAIT_S = 120.0
# What the roles may log while Redis fails over: each one WARNING line with its cause (never a
# traceback: the test also checks that no log holds one).
FAILING_OVER = (
    *REDIS_DOWN,
    "TimeoutError",
    "ClusterDownError",
    "MasterDownError",
    "TryAgainError",
    "ClusterError",
    "MasterNotFoundError",
    "SlaveNotFoundError",
    "ReadOnlyError",
    "RedisClusterException",
    "SlotNotCoveredError",
)


@dataclass
class Ha:
    env: FaultEnv
    settings: Settings
    children: dict[str, str]

    def start_roles(self) -> None:
        for name in ("w1", "w2"):
            self.env.procs.spawn(
                name, ["-m", "duecast.worker", "--app", APP], self.children, allow=FAILING_OVER
            )
        self.env.procs.spawn("dispatcher", ["-m", "duecast.dispatcher"], self.children, allow=FAILING_OVER)

    def ran(self, source: str, id_: int) -> bool:
        return any(e.source == source and e.id == id_ for e in read_log(self.env.exec_log))

    def jobs_left(self) -> int:
        table = self.settings.jobs.table
        return int(
            self.env.query(f"SELECT COUNT(*) FROM `{table}` WHERE dc_state <> {int(State.DONE)}")[0][0]
        )


@pytest.fixture
def servers(tmp_path: Path) -> Iterator[Servers]:
    started = Servers(tmp_path)
    try:
        yield started
    finally:
        started.kill_all()


@pytest.fixture
def make_ha(
    fault_env: Callable[..., FaultEnv],
    mysql_settings: MySQLSettings,
    redis_settings: RedisSettings,
    sql: pymysql.cursors.Cursor,
    procs: Procs,
) -> Iterator[Callable[[dict[str, str]], Ha]]:
    made: list[Settings] = []

    def make(redis_env: dict[str, str]) -> Ha:
        env = fault_env("rescan", claim_batch=50, high_water=200)
        table = f"jobs_{uuid.uuid4().hex[:8]}"
        jobs = {"table": table, "schedules_table": f"{table}_s", "queues": ["default"], "retention_s": 3600}
        settings = Settings(mysql=mysql_settings, redis=redis_settings, jobs=jobs)  # type: ignore[arg-type]
        migrate.apply(settings)
        made.append(settings)
        # The roles' timing at duecast's defaults (the fault tier shortens the backoff and the
        # dispatcher's intervals): the recovery measured is what a deployment gets.
        shortened = ("DUECAST_JOBS", *TIMING)
        children = {k: v for k, v in env.env.items() if not k.startswith(shortened)}
        children.update(redis_env)
        children.update(
            {
                "DUECAST_JOBS": json.dumps(jobs),
                "DUECAST_REDIS__KEY_PREFIX": f"{redis_settings.key_prefix}-ha{uuid.uuid4().hex[:6]}",
                "DUECAST_TEST_ROW_DELAY_MS": "2",
            }
        )
        env.insert(ROWS)
        Enqueuer(settings, None).enqueue_many([Job("ha_job", i, priority=5) for i in range(JOB_COUNT)])
        return Ha(env, settings, children)

    yield make
    procs.kill_all()  # before their tables go
    for settings in made:
        drop_job_tables(sql, settings.jobs)


def _under_load(ha: Ha, fault: Callable[[], None], what: str) -> dict[str, float]:
    """Start the roles, inject `fault` mid-run, add fresh work at that instant; returns the seconds from
    the fault to the fresh row's check and the fresh job's run, after asserting nothing was lost and
    no (id, attempt) ran twice."""
    env = ha.env
    ha.start_roles()
    env.wait_for(
        lambda: len(read_log(env.exec_log)) >= 300, "rows and jobs to be flowing before the fault", 60
    )
    fault_at = time.monotonic()
    fault()
    env.insert(1, start=FRESH_ROW, due_ago_s=3 * RESCAN_PERIOD_S)  # due before every other row
    (fresh_job,) = Enqueuer(ha.settings, None).enqueue_many([Job("ha_job", "fresh", priority=0)])
    seen: dict[str, float] = {}

    def fresh_done() -> bool:
        for key, source, id_ in (("check", env.source.name, FRESH_ROW), ("job", JOBS, fresh_job)):
            if key not in seen and ha.ran(source, id_):
                seen[key] = time.monotonic() - fault_at
        return len(seen) == 2

    env.wait_for(fresh_done, f"a fresh row and a fresh job to run after {what}", WAIT_S)
    print(f"\n{what}: fresh check {seen['check']:.1f}s, fresh job {seen['job']:.1f}s after the fault")
    env.wait_for(
        lambda: not env.pending() and ha.jobs_left() == 0, f"every row and job done after {what}", WAIT_S
    )

    log = read_log(env.exec_log)
    rows = classify(
        log,
        env.source.name,
        [*range(1, ROWS + 1), FRESH_ROW],
        env.pending(),
        env.column("checked_by_attempt"),
    )
    assert not rows.lost
    assert not rows.duplicates
    assert not rows.unexpected
    assert not rows.wrong_outcome
    jobs = classify(log, JOBS, [int(i) for (i,) in env.query(f"SELECT id FROM `{ha.settings.jobs.table}`")])
    assert not jobs.lost
    assert not jobs.duplicates
    assert not jobs.unexpected
    for proc in env.procs.procs.values():
        assert proc.alive(), f"{proc.name} exited"
        assert "Traceback" not in proc.log.read_text(), f"{proc.name} logged a traceback"
    assert max(seen.values()) <= RECOVER_S, seen
    return seen


def test_a_sentinel_master_killed_under_load(
    servers: Servers, make_ha: Callable[[dict[str, str]], Ha]
) -> None:
    topology = Sentinel(servers)
    topology.start()
    old = topology.master
    _under_load(make_ha(topology.env()), lambda: servers.kill(f"redis-{old}"), "a Sentinel master killed")
    assert topology.master_port() == topology.replica  # the replica was promoted


def test_sentinel_failover_under_load(servers: Servers, make_ha: Callable[[dict[str, str]], Ha]) -> None:
    topology = Sentinel(servers)
    topology.start()

    def failover() -> None:
        with redis.Redis(port=topology.sentinels[0], socket_timeout=5) as sentinel:
            sentinel.execute_command("SENTINEL", "FAILOVER", "duecast-ha")  # type: ignore[no-untyped-call]
        # The fresh work goes in once the Sentinels name the new master: its run then proves the
        # roles followed the switch (the time still counts from the command).
        wait_for(lambda: topology.master_port() == topology.replica, 30, "the Sentinels to switch masters")

    _under_load(make_ha(topology.env()), failover, "SENTINEL FAILOVER")
    assert topology.master_port() == topology.replica


def test_the_cluster_node_of_duecasts_slot_killed_under_load(
    servers: Servers, make_ha: Callable[[dict[str, str]], Ha]
) -> None:
    topology = Cluster(servers)
    topology.start()
    ha = make_ha(topology.env())
    prefix = ha.children["DUECAST_REDIS__KEY_PREFIX"]
    owner = topology.owner_of(prefix)
    _under_load(ha, lambda: servers.kill(f"redis-{owner}"), "the cluster master of duecast's slot killed")
    assert topology.owner_of(prefix) != owner  # its replica serves the slot now
