"""Redis HA under load (issue 24.10), on private servers: a Sentinel-managed master losing its process or
handing over by `SENTINEL FAILOVER`, and a Redis Cluster losing the master of duecast's slot (every key
of a prefix shares the hash tag {prefix}) or moving that slot to another master (a reshard). Real
dispatcher and worker processes run a re-scan source and a job queue through it: nothing is lost, no
(id, attempt) runs twice, and fresh work (a row due first and a job of the first priority, added at
the fault; a row at a reshard's end) runs within RECOVER_S of the fault. Each measured recovery is
printed (`-s` shows it); docs/reliability.md's table quotes them.
"""

from __future__ import annotations

import json
import re
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import pymysql
import pytest
import redis
from redis.cluster import RedisCluster
from redis.exceptions import RedisClusterException

from duecast.shared.api.enqueue import Enqueuer, Job
from duecast.shared.fanout.keys import Keys
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
# What the roles may log while Redis fails over or a cluster slot moves: each one WARNING line with its
# cause (never a traceback: the test also checks that no log holds one).
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
    "AskError",  # a MULTI on a slot being moved (MovedError, once it has: its class name too)
    "MovedError",
)


@dataclass
class Ha:
    env: FaultEnv
    settings: Settings
    children: dict[str, str]

    def start_roles(self) -> None:
        self.start_workers()
        self.start_dispatcher()

    def start_workers(self) -> None:
        for name in ("w1", "w2"):
            self.env.procs.spawn(
                name, ["-m", "duecast.worker", "--app", APP], self.children, allow=FAILING_OVER
            )

    def start_dispatcher(self) -> None:
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


class MakeHa(Protocol):
    def __call__(
        self, redis_env: dict[str, str], *, jobs: Mapping[str, object] | None = ..., job_count: int = ...
    ) -> Ha: ...


@pytest.fixture
def make_ha(
    fault_env: Callable[..., FaultEnv],
    mysql_settings: MySQLSettings,
    redis_settings: RedisSettings,
    sql: pymysql.cursors.Cursor,
    procs: Procs,
) -> Iterator[MakeHa]:
    """make_ha(redis_env, jobs=job settings over the defaults here, job_count=...) -> an Ha."""
    made: list[Settings] = []

    def make(
        redis_env: dict[str, str], *, jobs: Mapping[str, object] | None = None, job_count: int = JOB_COUNT
    ) -> Ha:
        env = fault_env("rescan", claim_batch=50, high_water=200)
        table = f"jobs_{uuid.uuid4().hex[:8]}"
        base = {"table": table, "schedules_table": f"{table}_s", "queues": ["default"], "retention_s": 3600}
        job_settings = {**base, **(jobs or {})}
        settings = Settings(mysql=mysql_settings, redis=redis_settings, jobs=job_settings)  # type: ignore[arg-type]
        migrate.apply(settings)
        made.append(settings)
        # The roles' timing at duecast's defaults (the fault tier shortens the backoff and the
        # dispatcher's intervals): the recovery measured is what a deployment gets.
        shortened = ("DUECAST_JOBS", *TIMING)
        children = {k: v for k, v in env.env.items() if not k.startswith(shortened)}
        children.update(redis_env)
        children.update(
            {
                "DUECAST_JOBS": json.dumps(job_settings),
                "DUECAST_REDIS__KEY_PREFIX": f"{redis_settings.key_prefix}-ha{uuid.uuid4().hex[:6]}",
                "DUECAST_TEST_ROW_DELAY_MS": "2",
            }
        )
        env.insert(ROWS)
        Enqueuer(settings, None).enqueue_many([Job("ha_job", i, priority=5) for i in range(job_count)])
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
    _assert_all_done_once(ha, what)
    assert max(seen.values()) <= RECOVER_S, seen
    return seen


def _assert_all_done_once(ha: Ha, what: str) -> None:
    """Every row (the fresh one too) checked and every job done, none lost, no (id, attempt) run
    twice, every role alive and no traceback in any log."""
    env = ha.env
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


def test_a_sentinel_master_killed_under_load(servers: Servers, make_ha: MakeHa) -> None:
    topology = Sentinel(servers)
    topology.start()
    old = topology.master
    _under_load(make_ha(topology.env()), lambda: servers.kill(f"redis-{old}"), "a Sentinel master killed")
    assert topology.master_port() == topology.replica  # the replica was promoted


# The roles must leave a master the Sentinels replaced well before they demote it (~8-10 s after the
# switch, by their design), not keep pushing to it: within the pool's check interval (1 s), a worker's
# pop in flight (1 s) and slack for a loaded machine.
LEAVE_OLD_MASTER_S = 4.0


WATCH_NAME = "duecast-test-watch"


class OldMasterWatch:
    """Polls the old master after a failover: when no role's connection is left on it (its normal
    clients other than the Sentinels' and this one), and when the Sentinels demote it."""

    def __init__(self, port: int, since: float) -> None:
        self.port, self.since = port, since
        self.switched: float | None = None  # set by the test once the Sentinels name the new master
        self.left: float | None = None
        self.demoted: float | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        # Named, so the reconnection after the demotion closed it is still told apart from the roles.
        with redis.Redis(port=self.port, socket_timeout=2, client_name=WATCH_NAME) as old:
            while (self.left is None or self.demoted is None) and time.monotonic() - self.since < 60:
                try:
                    now = time.monotonic() - self.since
                    roles = [
                        c
                        for c in old.client_list(_type="normal")
                        if c["name"] != WATCH_NAME and not c["name"].startswith("sentinel-")
                    ]
                    if self.left is None and not roles:
                        self.left = now
                    if self.demoted is None and old.execute_command("ROLE")[0] in ("slave", b"slave"):  # type: ignore[no-untyped-call]
                        self.demoted = now
                except redis.RedisError:
                    pass  # the demotion closes this connection too: redis-py reconnects
                time.sleep(0.05)


def test_sentinel_failover_under_load(servers: Servers, make_ha: MakeHa) -> None:
    topology = Sentinel(servers)
    topology.start()
    watched: list[OldMasterWatch] = []

    def failover() -> None:
        with redis.Redis(port=topology.sentinels[0], socket_timeout=5) as sentinel:
            sentinel.execute_command("SENTINEL", "FAILOVER", "duecast-ha")  # type: ignore[no-untyped-call]
        watched.append(OldMasterWatch(topology.master, time.monotonic()))
        # The fresh work goes in once the Sentinels name the new master: its run then proves the
        # roles followed the switch (the time still counts from the command).
        wait_for(lambda: topology.master_port() == topology.replica, 30, "the Sentinels to switch masters")
        watched[0].switched = time.monotonic() - watched[0].since

    seen = _under_load(make_ha(topology.env()), failover, "SENTINEL FAILOVER")
    assert topology.master_port() == topology.replica
    (watch,) = watched
    wait_for(lambda: watch.left is not None and watch.demoted is not None, 60, "the old master watched")
    assert watch.left is not None
    assert watch.switched is not None
    print(
        f"SENTINEL FAILOVER: Sentinels switched {watch.switched:.1f}s, roles off the old master "
        f"{watch.left:.1f}s, old master demoted {watch.demoted:.1f}s after the command"
    )
    assert watch.left <= watch.switched + LEAVE_OLD_MASTER_S, "the roles stayed on the replaced master"
    # Fresh work pushed to the old master in the second before the dispatcher left it is requeued by
    # its canary (a switch counts as lost entries), not left for the visibility timeout.
    assert watch.demoted is not None
    assert max(seen.values()) < watch.demoted, "fresh work waited past the old master's demotion"


def test_the_cluster_node_of_duecasts_slot_killed_under_load(servers: Servers, make_ha: MakeHa) -> None:
    topology = Cluster(servers)
    topology.start()
    ha = make_ha(topology.env())
    prefix = ha.children["DUECAST_REDIS__KEY_PREFIX"]
    owner = topology.owner_of(prefix)
    _under_load(ha, lambda: servers.kill(f"redis-{owner}"), "the cluster master of duecast's slot killed")
    assert topology.owner_of(prefix) != owner  # its replica serves the slot now


# The reshard (issue 24): duecast's slot moved to another master live, a long ready list in it.
LONG_LIST = 10_000  # job entries queued in duecast's slot when the reshard starts (asserted)
RESHARD_JOBS = 11_000
# One job per entry (run_size 1): the jobs' ready list holds an entry per job queued; two claims fill
# it (10,000 at most each), and high_water lets them.
RESHARD_JOB_SETTINGS = {"run_size": 1, "claim_batch": 10_000, "high_water": 20_000}
# The keys move one per MIGRATE, PACE_S apart: the slot stays half moved for about a second (duecast's
# slot holds a dozen keys; one shared with an application's keys would take longer).
KEYS_PER_MIGRATE = 1
MIGRATE_PACE_S = 0.1
SAMPLE_S = 0.02
# A tick that met the slot moving, as the loop logs it (one WARNING line, no traceback: asserted).
MOVING_SLOT = re.compile(r"WARNING .* tick failed .*(?:AskError|MovedError|TryAgainError)")


class Sampler(threading.Thread):
    """Every SAMPLE_S, until stopped: (when, bytes in the execution log, entries in the jobs' ready
    list), read on a cluster client of its own."""

    def __init__(self, exec_log: Path, cluster: RedisCluster, ready: str) -> None:
        super().__init__(daemon=True)
        self.exec_log, self.cluster, self.ready = exec_log, cluster, ready
        self.samples: list[tuple[float, int, int]] = []
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.wait(SAMPLE_S):
            try:
                queued = int(self.cluster.llen(self.ready))
            except (redis.RedisError, RedisClusterException):
                continue  # a sample missed; the next one counts
            self.samples.append((time.monotonic(), self.exec_log.stat().st_size, queued))

    def longest_still_s(self, start: float, end: float) -> float:
        """The longest time between start and end in which no execution was logged."""
        grew = [start]
        kept = [(t, size) for t, size, _ in self.samples if start <= t <= end]
        grew += [t for (t, size), (_, before) in zip(kept[1:], kept, strict=False) if size > before]
        return max(b - a for a, b in zip(grew, [*grew[1:], end], strict=True))

    def popped_after(self, after: float) -> float | None:
        """The first sample past `after` whose ready list is shorter than at the last sample before
        it (a pop landed on the slot's new master: nothing else shortens the list, every job was
        pushed before the reshard); None while there is none."""
        before = [queued for t, _, queued in self.samples if t < after][-1]
        return next((t for t, _, queued in list(self.samples) if t >= after and queued < before), None)


def test_duecasts_slot_resharded_live_with_a_long_ready_list(servers: Servers, make_ha: MakeHa) -> None:
    """The slot of duecast's `{prefix}` moved to another master while 10,000+ job entries wait in it and
    two workers drain it, as `redis-cli --cluster reshard` moves it. While it is half moved, the
    pop-and-hold MULTI is refused whole (TRYAGAIN, ASK; MOVED once it has moved): one WARNING
    line per failed tick, retried, nothing moved. Measured from the last SETSLOT: a fresh row
    (due first, in its own short list) checked, and the jobs' list popped again."""
    topology = Cluster(servers)
    topology.start()
    ha = make_ha(topology.env(), jobs=RESHARD_JOB_SETTINGS, job_count=RESHARD_JOBS)
    # A long list drained in seconds, not tens (the fault tier pops 10 entries at a time, and the
    # handlers here take 2 ms).
    ha.children.update({"DUECAST_TEST_ROW_DELAY_MS": "0", "DUECAST_WORKER__POP_BATCH": "100"})
    env, prefix = ha.env, ha.children["DUECAST_REDIS__KEY_PREFIX"]
    ready = Keys(prefix).ready(JOBS)
    owner = topology.owner_of(prefix)
    target = next(port for port in topology.masters() if port != owner)
    with (
        RedisCluster(host="127.0.0.1", port=topology.ports[0], socket_timeout=5) as cluster,
        RedisCluster(host="127.0.0.1", port=topology.ports[0], socket_timeout=5) as sampled,
    ):
        ha.start_dispatcher()
        env.wait_for(lambda: int(cluster.llen(ready)) >= RESHARD_JOBS, "every job queued in Redis", 60)
        ha.start_workers()
        env.wait_for(
            lambda: sum(e.source == JOBS for e in read_log(env.exec_log)) >= 300,
            "jobs to be flowing before the reshard",
            60,
        )
        queued = int(cluster.llen(ready))
        assert queued >= LONG_LIST, f"only {queued} job entries queued when the reshard began"
        sampler = Sampler(env.exec_log, sampled, ready)
        sampler.start()
        try:
            begun = time.monotonic()
            moved = topology.reshard(prefix, target, keys_per_migrate=KEYS_PER_MIGRATE, pace_s=MIGRATE_PACE_S)
            ended = time.monotonic()
            env.insert(1, start=FRESH_ROW, due_ago_s=3 * RESCAN_PERIOD_S)  # due before every other row
            seen: dict[str, float] = {}

            def recovered() -> bool:
                if "check" not in seen and ha.ran(env.source.name, FRESH_ROW):
                    seen["check"] = time.monotonic() - ended
                if "pop" not in seen and (popped := sampler.popped_after(ended)) is not None:
                    seen["pop"] = popped - ended
                return len(seen) == 2

            what = "a fresh row checked and the jobs' list popped after the reshard"
            env.wait_for(recovered, what, WAIT_S)
        finally:  # before its client closes
            sampler.stop.set()
            sampler.join(5)
    still_s = sampler.longest_still_s(begun, ended + max(seen.values()))
    warned = sum(len(MOVING_SLOT.findall(p.log.read_text())) for p in env.procs.procs.values())
    print(
        f"\nreshard of slot {moved.slot} ({moved.keys} keys MIGRATEd, {queued:,} job entries queued), "
        f"{moved.source} -> {moved.target}: {moved.took_s:.1f}s, {warned} ticks failed on it; longest "
        f"time with no run from its start {still_s:.1f}s; after its end: the jobs' list popped again "
        f"{seen['pop']:.1f}s, a fresh row checked {seen['check']:.1f}s"
    )
    assert warned > 0, "no role met the slot while it moved: the reshard tested nothing"
    _assert_all_done_once(ha, "the reshard")
    # No entry was lost and came back by the visibility timeout or a requeue: a new attempt.
    assert {e.attempt for e in read_log(env.exec_log)} == {1}
    wait_for(lambda: topology.owner_of(prefix) == target, 10, "the nodes to name the slot's new master")
    assert max(seen.values()) <= RECOVER_S, seen
