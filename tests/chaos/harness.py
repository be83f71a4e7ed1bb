"""One chaos run: a private Redis, duecast processes on a fresh jobs table, a fault log, a supervisor
that restarts dead workers (as systemd or Kubernetes would), and the checker at the end.

Every random choice comes from one seed, printed at the start, so a run can be replayed.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pymysql

from shared import migrate
from shared.db import connect
from shared.jobs import Enqueuer, Job
from shared.settings import MySQLSettings, Settings
from shared.states import State
from tests.chaos.checker import Fault, Verdict, classify, read_executions
from tests.faults.conftest import _NOT_INHERITED, REDIS_DOWN, SESSION_LOST
from tests.faults.private_redis import PrivateRedis
from tests.faults.procs import Proc, Procs, wait_for

APP = "tests.chaos.app"
# What a process may log while the chaos hits it: Redis restarts, killed sessions, poison tasks.
EXPECTED = (*REDIS_DOWN, *SESSION_LOST, "RuntimeError")
POLL_S = 0.05


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
    workers: dict[str, Proc] = field(default_factory=dict)
    dispatchers: dict[str, Proc] = field(default_factory=dict)
    _next: int = 0
    _stopped: set[int] = field(default_factory=set)

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)
        suffix = uuid.uuid4().hex[:8]
        self.table = f"chaos_jobs_{suffix}"
        self.acks = f"chaos_acks_{suffix}"
        self.exec_log = self.tmp / "executions.log"
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
            **self.jobs,
        }
        self.settings = Settings(
            mysql=self.mysql, redis={"url": self.redis.url, "key_prefix": f"chaos-{suffix}"}, jobs=self.jobs
        )  # type: ignore[arg-type]
        migrate.apply(self.settings)
        self.sql = connect(self.mysql)
        self.sql.autocommit(True)
        self.query(
            f"CREATE TABLE `{self.acks}` (id BIGINT AUTO_INCREMENT PRIMARY KEY, "
            "n BIGINT NOT NULL, pid INT NOT NULL, KEY (n))"
        )
        self.env = {k: v for k, v in os.environ.items() if not k.startswith(_NOT_INHERITED)}
        self.env.update(
            {
                "DUECAST_MYSQL__DATABASE": self.mysql.database,
                "DUECAST_MYSQL__HOST": self.mysql.host,
                "DUECAST_MYSQL__PORT": str(self.mysql.port),
                "DUECAST_REDIS__URL": self.redis.url,
                "DUECAST_REDIS__KEY_PREFIX": f"chaos-{suffix}",
                "DUECAST_JOBS": json.dumps(self.jobs),
                "DUECAST_DISPATCHER__POLL_INTERVAL_S": "0.05",
                "DUECAST_DISPATCHER__SWEEP_INTERVAL_S": "0.5",
                "DUECAST_DISPATCHER__LEADER_LEASE_S": "3",
                "DUECAST_WORKER__POP_BATCH": "100",
                "DUECAST_WORKER__BLOCK_TIMEOUT_S": "0.5",
                "DUECAST_WORKER__ERROR_BACKOFF_S": "0.2",
                "DUECAST_CHAOS_EXEC_LOG": str(self.exec_log),
                "DUECAST_CHAOS_ACKS": self.acks,
                "PYTHONUNBUFFERED": "1",
            }
        )
        print(f"chaos seed {self.seed} (replay: DUECAST_CHAOS_SEED={self.seed}); logs in {self.tmp}")

    def close(self) -> None:
        self.query(f"DROP TABLE IF EXISTS `{self.table}`, `{self.table}_s`, `{self.acks}`")
        # The next scenario's dispatcher must not wait out this one's leader lease.
        self.query("DELETE FROM duecast_leases")
        self.query("DELETE FROM duecast_workers")
        self.sql.close()

    def query(self, stmt: str, args: object = None) -> list[tuple[Any, ...]]:
        with self.sql.cursor() as cur:
            cur.execute(stmt, args)
            return list(cur.fetchall())

    # ---------------------------------------------------------------- load

    def enqueue(self, n: int, poison: dict[str, int] | None = None, batch: int = 10_000) -> None:
        """n healthy `work` jobs; `poison` = {"raise": k, "die": k, "hang": k} spread among them."""
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
                jobs.append(Job("work", {"n": number}))
                self.healthy.add(number)
            if len(jobs) >= batch:
                enqueuer.enqueue_many(jobs)
                jobs = []
        if jobs:
            enqueuer.enqueue_many(jobs)
        enqueuer.db.close()

    # ---------------------------------------------------------------- processes

    def dispatcher(self, name: str, **env: str) -> Proc:
        proc = self.procs.spawn(
            name, ["-m", "dispatcher"], {**self.env, **env}, may_exit=True, allow=EXPECTED
        )
        self.dispatchers[name] = proc
        return proc

    def worker(self, name: str) -> Proc:
        proc = self.procs.spawn(name, ["-m", "worker", "--app", APP], self.env, may_exit=True, allow=EXPECTED)
        self.workers[name] = proc
        return proc

    def supervise(self) -> bool:
        """Restart every worker that died (a poison job, a kill), recording its death."""
        for name, proc in list(self.workers.items()):
            if not proc.alive():
                if not any(f.pid == proc.pid and f.kind == "sigkill" for f in self.faults):
                    self.fault("died", proc.pid)
                del self.workers[name]
                self.worker(f"{name.split('+')[0]}+{len(self.procs.procs)}")
        return True

    def fault(self, kind: str, pid: int | None = None) -> None:
        self.faults.append(Fault(time.time(), kind, pid))
        print(f"fault: {kind}" + (f" pid {pid}" if pid else ""))

    # ---------------------------------------------------------------- faults

    def kill_random_worker(self) -> None:
        self.supervise()  # never "kill" a worker that is already gone
        proc = self.rng.choice([p for p in self.workers.values() if p.pid not in self._stopped and p.alive()])
        self.fault("sigkill", proc.pid)
        self.procs.kill(proc)

    def stop_worker_past_lease(self) -> Proc:
        proc = self.rng.choice(list(self.workers.values()))
        self.fault("sigstop", proc.pid)
        os.kill(proc.pid, signal.SIGSTOP)
        self._stopped.add(proc.pid)
        return proc

    def resume(self, proc: Proc) -> None:
        os.kill(proc.pid, signal.SIGCONT)
        self._stopped.discard(proc.pid)

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
            f"SELECT COUNT(*) FROM `{self.table}` WHERE task <> 'work' AND dc_state <> %s", (int(State.DEAD),)
        )
        return int(rows[0][0]) == 0

    def wait_done(self, timeout_s: float) -> float:
        """Until every healthy job is acked and every poison job is dead; returns the seconds it took."""
        started = time.monotonic()

        def done() -> bool:
            self.supervise()
            return self.acked() >= len(self.healthy) and self.poison_settled()

        wait_for(done, timeout_s, f"all {len(self.healthy):,} healthy jobs acked (seed {self.seed})")
        return time.monotonic() - started

    def verdict(self) -> Verdict:
        acks = {int(n): int(c) for n, c in self.query(f"SELECT n, COUNT(*) FROM `{self.acks}` GROUP BY n")}
        return classify(self.healthy, self.poison, read_executions(self.exec_log), acks, self.faults)


def kill_mysql_session(chaos: Chaos) -> bool:
    """KILL one MySQL session of a random live duecast process (found by its TCP client ports)."""
    from tests.faults.procs import tcp_peers  # noqa: PLC0415 - Linux /proc, the fault tier's helper

    procs = [p for p in [*chaos.workers.values(), *chaos.dispatchers.values()] if p.alive()]
    chaos.rng.shuffle(procs)
    rows = chaos.query(
        "SELECT ID, HOST FROM information_schema.PROCESSLIST WHERE DB = %s", (chaos.mysql.database,)
    )
    for proc in procs:
        ports = {str(local) for local, remote in tcp_peers(proc.pid) if remote == chaos.mysql.port}
        ids = [int(i) for i, host in rows if str(host).rsplit(":", 1)[-1] in ports]
        if ids:
            chaos.fault("mysql_kill", proc.pid)
            with contextlib.suppress(pymysql.err.OperationalError):  # it may have ended meanwhile
                chaos.query(f"KILL CONNECTION {chaos.rng.choice(ids)}")
            return True
    return False


def soak(chaos: Chaos, jobs: int, *, waves: int = 10, flushes: int = 1, redis_restarts: int = 2) -> float:
    """Scenario 1: one-off jobs enqueued in waves under random worker SIGKILLs, Redis restarts and
    a FLUSHALL, one dispatcher SIGKILLed right after a COMMIT, and a worker SIGSTOPped past its
    lease then resumed. One fault per wave at least; returns the seconds until all is acked."""
    per_wave = max(1, jobs // waves)
    chaos.enqueue(per_wave)
    first = chaos.dispatcher("dispatcher-crash", DUECAST_FAULTS__CRASH_AFTER_COMMIT="true")
    chaos.procs.wait_exit(first, 60)
    chaos.fault("dispatcher_killed_after_commit", first.pid)
    chaos.dispatcher("dispatcher")
    for i in range(3):
        chaos.worker(f"worker-{i}")
    started = time.monotonic()
    plan = ["flush"] * flushes + ["redis_restart"] * redis_restarts + ["stop"]
    plan += ["kill"] * max(0, waves - len(plan))
    chaos.rng.shuffle(plan)
    stopped: tuple[Proc, float] | None = None
    for step in plan:
        target = chaos.acked() + per_wave // 2
        chaos.enqueue(per_wave)
        # The next fault lands once half a wave has been worked off: faults meet work in flight.
        wait_for(
            lambda t=target: chaos.supervise() and chaos.acked() >= t,
            300,
            "work to flow",
            chaos.procs.check,
        )
        if stopped is not None and time.monotonic() > stopped[1]:
            chaos.resume(stopped[0])
            stopped = None
        if step == "flush":
            chaos.fault("redis_flush")
            chaos.redis.client.flushall()
        elif step == "redis_restart":
            chaos.fault("redis_restart")
            chaos.redis.restart()
        elif step == "stop":
            stopped = (chaos.stop_worker_past_lease(), time.monotonic() + chaos.lease_s * 2)
        else:
            chaos.kill_random_worker()
    if stopped is not None:
        wait_for(lambda: time.monotonic() > stopped[1], 60, "the stopped worker's lease to pass")
        chaos.resume(stopped[0])
    chaos.wait_done(max(300, jobs / 200))
    return time.monotonic() - started
