"""One chaos run: a private Redis, duecast processes on a fresh jobs table (and, for the soak, re-scan
sources and a cluster group beside it), a fault log with what each fault caught in workers' hands, a
supervisor that restarts dead workers (as systemd or Kubernetes would), and the checkers at the end.

Every random choice comes from one seed, printed at the start, so a run can be replayed.
"""

from __future__ import annotations

import json
import os
import random
import signal
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from duecast.shared.api.enqueue import Enqueuer, Job
from duecast.shared.settings import JOBS_SOURCE, JobsSettings, MySQLSettings, Settings
from duecast.shared.states import State
from duecast.shared.storage.admin import migrate
from duecast.shared.storage.db import connect
from tests.chaos.app import HEALTHY_TASKS
from tests.chaos.checker import (
    Fault,
    Holding,
    Verdict,
    WorkRecovery,
    classify,
    read_executions,
    work_recovery,
)
from tests.chaos.group import ClusterGroup, acks_table
from tests.chaos.limited import LimitedTask
from tests.chaos.rescan import RescanTables
from tests.chaos.rescan_checker import RescanVerdict, classify_rescan, read_rescan_log
from tests.faults.conftest import _NOT_INHERITED, REDIS_DOWN, SESSION_LOST
from tests.faults.private_redis import PrivateRedis
from tests.faults.procs import Proc, Procs, wait_for

APP = "tests.chaos.app"
# What a process may log while the chaos hits it: Redis restarts, killed sessions, poison tasks, and
# a Sentinel failover (only a Sentinel topology raises these: tests/chaos/sentinel.py).
SENTINEL_FAILING_OVER = ("MasterNotFoundError", "SlaveNotFoundError", "ReadOnlyError")
EXPECTED = (*REDIS_DOWN, *SESSION_LOST, "RuntimeError", *SENTINEL_FAILING_OVER)
POLL_S = 0.05
DEAD_LOOK_S = 1.0  # how often wait_done looks for a healthy job dead-lettered


@dataclass
class Chaos:
    mysql: MySQLSettings
    redis: PrivateRedis
    procs: Procs
    tmp: Path
    seed: int
    lease_s: float = 3.0
    jobs: dict[str, Any] = field(default_factory=dict)
    faults: list[Fault] = field(default_factory=list)
    healthy: set[int] = field(default_factory=set)
    poison: set[int] = field(default_factory=set)
    holdings: list[Holding] = field(default_factory=list)  # what faults caught in workers' hands
    measured: dict[str, list[float]] = field(default_factory=dict)  # other recoveries (s), by name
    pop_batch: int = 100
    workers: dict[str, Proc] = field(default_factory=dict)
    dispatchers: dict[str, Proc] = field(default_factory=dict)
    rescan: RescanTables | None = None
    group: ClusterGroup | None = None
    limited: LimitedTask | None = None
    faults_end: float | None = None  # the database's clock once the last fault was over
    _next: int = 0
    stopped: set[int] = field(default_factory=set)  # pids SIGSTOPped (tests/chaos/soak.py)
    _serves: dict[str, Sequence[str]] = field(default_factory=dict)  # worker name -> its --source list

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)
        suffix = self.suffix = uuid.uuid4().hex[:8]
        self.table = f"chaos_jobs_{suffix}"
        self.acks = f"chaos_acks_{suffix}"
        self.exec_log = self.tmp / "executions.log"
        self.msg_log = self.tmp / "messages.log"
        self.rescan_log = self.tmp / "rescan.log"
        self.limited_log = self.tmp / "limited.log"
        self.jobs = {
            "table": self.table,
            "schedules_table": f"{self.table}_s",
            "lease_s": self.lease_s,
            "timeout_s": max(self.lease_s, 6.0),
            "max_interruptions": 3,
            "max_attempts": 3,
            "retry_base_s": 0.2,
            "retry_cap_s": 1.0,
            "visibility_timeout_s": 5,
            # A worker's batch is pop_batch jobs in runs of a quarter of it: four runs per pop, as
            # with the defaults (2,000 / 500), so that faults meet batches of several runs.
            "run_size": max(1, self.pop_batch // 4),
            **self.jobs,
        }
        # Short leases need a lease keeper that gives a stalled renewal up sooner (settings check).
        self.mysql = self.mysql.model_copy(update={"lease_keeper_timeout_s": min(2.0, self.lease_s / 6)})
        self.settings = Settings(
            mysql=self.mysql,
            redis={**self.redis.settings_fields(), "key_prefix": f"chaos-{suffix}"},
            jobs=self.jobs,
        )
        migrate.apply(self.settings)
        self.sql = connect(self.mysql)
        self.sql.autocommit(True)
        acks_table(self.query, self.acks)
        self.env = {k: v for k, v in os.environ.items() if not k.startswith(_NOT_INHERITED)}
        self.env.update(
            {
                "DUECAST_MYSQL__DATABASE": self.mysql.database,
                "DUECAST_MYSQL__HOST": self.mysql.host,
                "DUECAST_MYSQL__PORT": str(self.mysql.port),
                "DUECAST_MYSQL__LEASE_KEEPER_TIMEOUT_S": str(self.mysql.lease_keeper_timeout_s),
                **self.redis.env(),
                "DUECAST_REDIS__KEY_PREFIX": f"chaos-{suffix}",
                "DUECAST_JOBS": json.dumps(self.jobs),
                "DUECAST_DISPATCHER__POLL_INTERVAL_S": "0.05",
                "DUECAST_DISPATCHER__SWEEP_INTERVAL_S": "0.5",
                "DUECAST_DISPATCHER__LEADER_LEASE_S": "3",
                "DUECAST_WORKER__POP_BATCH": str(self.pop_batch),
                "DUECAST_WORKER__BLOCK_TIMEOUT_S": "0.5",
                "DUECAST_WORKER__ERROR_BACKOFF_S": "0.2",
                "DUECAST_CHAOS_EXEC_LOG": str(self.exec_log),
                "DUECAST_CHAOS_ACKS": self.acks,
                "DUECAST_CHAOS_RESCAN_LOG": str(self.rescan_log),
                "DUECAST_CHAOS_MSG_LOG": str(self.msg_log),
                "DUECAST_CHAOS_LIMITED_LOG": str(self.limited_log),
                "PYTHONUNBUFFERED": "1",
            }
        )
        print(f"chaos seed {self.seed} (replay: DUECAST_CHAOS_SEED={self.seed}); logs in {self.tmp}")

    def close(self) -> None:
        jobs = self.settings.jobs
        tables = (jobs.table, jobs.schedules_table, jobs.runs_table, jobs.cursors_table, self.acks)
        self.query("DROP TABLE IF EXISTS " + ", ".join(f"`{t}`" for t in tables))
        if self.rescan is not None:
            self.rescan.drop()
        if self.group is not None:
            self.group.drop()
        # The next scenario's dispatcher must not wait out this one's leader lease.
        self.query("DELETE FROM duecast_leases")
        self.query("DELETE FROM duecast_workers")
        self.sql.close()

    def query(self, stmt: str, args: object = None) -> list[tuple[Any, ...]]:
        with self.sql.cursor() as cur:
            cur.execute(stmt, args)
            return list(cur.fetchall())

    def db_now(self) -> float:
        """The database's clock, which the acks' records use too (UNIX_TIMESTAMP(NOW(6)))."""
        return float(self.query("SELECT UNIX_TIMESTAMP(NOW(6))")[0][0])

    def add_rescan(self, **sizes: Any) -> RescanTables:
        """Re-scan sources for the processes started from now on (see tests/chaos/rescan.py)."""
        self.rescan = RescanTables(self.query, self.suffix, **{"lease_s": self.lease_s, **sizes})
        self.rescan.create_tables()
        self.settings = self.settings.model_copy(update={"sources": self.rescan.sources})
        migrate.apply(self.settings)
        self.rescan.create_triggers()
        self.env["DUECAST_SOURCES"] = json.dumps([s.model_dump(mode="json") for s in self.rescan.sources])
        return self.rescan

    def add_group(self) -> ClusterGroup:
        """A cluster group for the processes started from now on (see tests/chaos/group.py)."""
        self.group = ClusterGroup(self.query, self.suffix, self.jobs)
        self.group.create_tables()
        self.settings = self.settings.model_copy(update={"topics": self.group.topics})
        migrate.apply(self.settings)
        self.env["DUECAST_TOPICS"] = self.group.topics.model_dump_json()
        self.env["DUECAST_CHAOS_MSG_ACKS"] = self.group.acks
        return self.group

    def add_limited(self, **sizes: Any) -> LimitedTask:
        """The limited task for the processes started from now on (see tests/chaos/limited.py)."""
        self.limited = LimitedTask(self.query, self.table, self.acks, self.limited_log, **sizes)
        self.jobs = self.limited.jobs_settings(self.jobs)
        self.settings = self.settings.model_copy(update={"jobs": JobsSettings.model_validate(self.jobs)})
        migrate.apply(self.settings)  # the jobs table's dc_key index
        self.limited.create_trigger()
        self.env["DUECAST_JOBS"] = json.dumps(self.jobs)
        return self.limited

    # ---------------------------------------------------------------- load

    def enqueue(
        self, n: int, poison: dict[str, int] | None = None, batch: int = 10_000, limited: bool = False
    ) -> None:
        """n healthy `work` jobs (`limited`: of the limited task); `poison` = {"raise": k, "die": k,
        "hang": k} spread among them."""
        kinds = [k for k, count in (poison or {}).items() for _ in range(count)]
        slots = set(self.rng.sample(range(n + len(kinds)), len(kinds)))
        enqueuer = Enqueuer(self.settings, None)
        jobs: list[Job] = []
        for i in range(n + len(kinds)):
            number = self._next
            self._next += 1
            if i in slots:
                jobs.append(Job(kinds.pop(), {"n": number}))
                self.poison.add(number)
            else:
                job = self.limited.job(number) if limited and self.limited else Job("work", {"n": number})
                jobs.append(job)
                self.healthy.add(number)
            if len(jobs) >= batch:
                enqueuer.enqueue_many(jobs)
                jobs = []
        if jobs:
            enqueuer.enqueue_many(jobs)
        enqueuer.db.close()

    # ---------------------------------------------------------------- processes

    def dispatcher(self, name: str, module: str = "duecast.dispatcher", **env: str) -> Proc:
        """`module`: the real dispatcher, or a test-owned entry that stops it at one instant."""
        proc = self.procs.spawn(name, ["-m", module], {**self.env, **env}, may_exit=True, allow=EXPECTED)
        self.dispatchers[name] = proc
        return proc

    def worker(self, name: str, sources: Sequence[str] = (JOBS_SOURCE,)) -> Proc:
        """`sources`: what it serves, in pop order (the first non-empty list is popped first)."""
        args = ["-m", "duecast.worker", "--app", APP, *(a for s in sources for a in ("--source", s))]
        proc = self.procs.spawn(name, args, self.env, may_exit=True, allow=EXPECTED)
        self.workers[name] = proc
        self._serves[name] = sources
        return proc

    def supervise(self) -> bool:
        """Restart every worker that died (a poison job, a kill), recording its death."""
        for name, proc in list(self.workers.items()):
            if not proc.alive():
                if not any(f.pid == proc.pid and f.kind == "sigkill" for f in self.faults):
                    self.fault("died", proc.pid)
                del self.workers[name]
                self.worker(f"{name.split('+')[0]}+{len(self.procs.procs)}", self._serves.pop(name))
        return True

    def stop_all(self) -> None:
        """SIGTERM the dispatchers (no more claims), then the workers: each finishes its batch, so no
        execution is left half-way when the checkers read."""
        for proc in [*self.dispatchers.values(), *self.workers.values()]:
            self.procs.signal(proc, signal.SIGTERM)
            self.procs.wait_exit(proc, 60)

    def fault(self, kind: str, pid: int | None = None) -> None:
        self.faults.append(Fault(self.db_now(), kind, pid))
        print(f"fault: {kind}" + (f" pid {pid}" if pid else "") + time.strftime(" at %H:%M:%S"))

    # ---------------------------------------------------------------- faults

    def live_workers(self) -> list[Proc]:
        self.supervise()  # never "kill" a worker that is already gone
        return [p for p in self.workers.values() if p.pid not in self.stopped and p.alive()]

    def leader(self) -> Proc | None:
        rows = self.query("SELECT holder FROM duecast_leases WHERE expires_at > NOW(6)")
        pids = {int(str(h).split(":")[1]) for (h,) in rows}
        return next((p for p in self.dispatchers.values() if p.pid in pids and p.alive()), None)

    # ---------------------------------------------------------------- progress and verdict

    def acked(self) -> int:
        return int(self.query(f"SELECT COUNT(DISTINCT n) FROM `{self.acks}`")[0][0])

    def reconnect(self) -> None:
        """After the MariaDB server restarted: the harness' own session went with it."""
        self.sql = connect(self.mysql)
        self.sql.autocommit(True)

    def poison_settled(self) -> bool:
        rows = self.query(
            f"SELECT COUNT(*) FROM `{self.table}` WHERE task NOT IN %s AND dc_state <> %s",
            (HEALTHY_TASKS, int(State.DEAD)),
        )
        return int(rows[0][0]) == 0

    def wait_done(self, timeout_s: float) -> float:
        """Until every healthy job is acked and every poison job is dead; returns the seconds it took."""
        started = time.monotonic()

        looked = [0.0]

        def done() -> bool:
            self.supervise()
            if time.monotonic() - looked[0] > DEAD_LOOK_S:
                looked[0] = time.monotonic()
                if self.healthy_dead():  # nothing acks it now: fail with what is left, not at a timeout
                    raise AssertionError(f"a healthy job is dead (seed {self.seed}); left: {self.left()}")
            messages = self.group is None or self.group.acked() >= len(self.group.expected)
            return messages and self.acked() >= len(self.healthy) and self.poison_settled()

        try:
            wait_for(done, timeout_s, f"all {len(self.healthy):,} healthy jobs acked (seed {self.seed})")
        except AssertionError as exc:
            if "left:" in str(exc):
                raise
            raise AssertionError(f"{exc}; left: {self.left()}") from None
        return time.monotonic() - started

    def healthy_dead(self) -> int:
        """Healthy jobs dead-lettered: none may be, and none would ever be acked."""
        rows = self.query(
            f"SELECT COUNT(*) FROM `{self.table}` WHERE task IN %s AND dc_state = %s",
            (HEALTHY_TASKS, int(State.DEAD)),
        )
        return int(rows[0][0])

    def left(self) -> str:
        """What a run that timed out left: jobs by (task, state), and runs by state (their jobs)."""
        jobs = self.settings.jobs
        states = self.query(f"SELECT task, dc_state, COUNT(*) FROM `{jobs.table}` GROUP BY task, dc_state")
        runs = self.query(
            f"SELECT dc_state, COUNT(*), SUM(jobs), MIN(dc_dispatched_at), MIN(lease_until) "
            f"FROM `{jobs.runs_table}` GROUP BY dc_state"
        )
        due = self.query(f"SELECT COUNT(*) FROM `{jobs.table}` WHERE dc_state = 0 AND run_at <= NOW(6)")
        cursors = self.query(
            f"SELECT priority, run_at, id FROM `{jobs.cursors_table}` WHERE run_at > '1000-01-02'"
        )
        dead = self.query(
            "SELECT id, errors, interruptions, dc_attempt, worker, LEFT(last_error, 300) "
            f"FROM `{jobs.table}` WHERE task IN %s AND dc_state = %s LIMIT 5",
            (HEALTHY_TASKS, int(State.DEAD)),
        )
        return f"jobs {states}, due {due}, runs {runs}, cursors {cursors}, healthy jobs dead {dead}"

    def wait_rescanned(self, timeout_s: float) -> bool:
        """Until every re-scan row has been checked since the faults ended (or `timeout_s`: the
        verdict then counts the rows left as lost)."""
        assert self.rescan is not None
        assert self.faults_end is not None
        units, deadline = self.rescan.units(), time.monotonic() + timeout_s
        # Since the last fault: a worker stopped by the soak dies ("died") once resumed, maybe
        # after faults_end, and the checker wants every row checked after each fault.
        while self.rescan.covered_since(max([self.faults_end, *(f.at for f in self.faults)])) < units:
            self.procs.check()
            self.supervise()
            if time.monotonic() > deadline:
                return False
            time.sleep(POLL_S)
        return True

    def verdict(self) -> Verdict:
        acks = {int(n): int(c) for n, c in self.query(f"SELECT n, COUNT(*) FROM `{self.acks}` GROUP BY n")}
        return classify(self.healthy, self.poison, read_executions(self.exec_log), acks, self.faults)

    def message_verdict(self) -> Verdict:
        """The cluster group's messages, judged as jobs are (none of them poison)."""
        assert self.group is not None
        executions = read_executions(self.msg_log)
        return classify(self.group.expected, set(), executions, self.group.acks_by_number(), self.faults)

    def acks_tables(self) -> dict[str, str]:
        """Source -> the table its handler records acks in (app.record_ack)."""
        group = {self.group.source: self.group.acks} if self.group is not None else {}
        return {f"{JOBS_SOURCE}.default": self.acks, **group}

    def work_recovery(self) -> WorkRecovery:
        """How long the jobs and messages each fault caught in workers' hands took to be acked."""
        times: dict[str, dict[int, list[float]]] = {}
        for source, table in self.acks_tables().items():
            per_unit = times[source] = {}
            for unit, at in self.query(f"SELECT unit, at FROM `{table}` ORDER BY at"):
                per_unit.setdefault(int(unit), []).append(float(at))
        return work_recovery(self.holdings, times)

    def rescan_verdict(self) -> RescanVerdict:
        """Read once every process has stopped (`stop_all`): no execution may be in flight."""
        assert self.rescan is not None
        assert self.faults_end is not None
        runs, checks = read_rescan_log(self.rescan_log), self.rescan.checks()
        return classify_rescan(self.rescan.expected(), runs, checks, self.faults, self.faults_end)
