"""A task's fleet-wide limits (`[jobs.task_limits.<task>]`) against real processes, MariaDB and Redis:
its rate_limit_per_s holds in every 1-s window of claims (and, within 1.15x, of handler starts)
across three workers and a leader kill, while another task's jobs of the same queue run unlimited;
its max_running is never exceeded, counted by the handlers themselves, through a worker's SIGKILL,
and the dead worker's slots come back with its leases. Handler calls are timed in
tests/faults/limits_app.py (the task `limited`)."""

from __future__ import annotations

import json
import os
import statistics
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pymysql
import pytest

from duecast.shared.api.enqueue import Enqueuer, Job
from duecast.shared.settings import DispatcherSettings, MySQLSettings, RedisSettings, Settings, WorkerSettings
from duecast.shared.storage.admin import migrate
from tests.faults.conftest import _NOT_INHERITED
from tests.faults.env import DISPATCHED, IDLE
from tests.faults.limits_app import claim_bound, most_in_window, most_running, read_calls
from tests.faults.procs import Proc, Procs, serving, wait_for
from tests.faults.runs import drop_job_tables

pytestmark = pytest.mark.faults

RATE = 200
JOBS = 1200  # 6 s at the limit
# Another task's jobs in the same queue, not limited. (2,000 of them kept the 2 cores busy for
# seconds, and the dispatcher's claims then came further apart than its bucket holds, 50 ms: the
# limited task ran at a median 170/s instead of 200/s. docs/protecting.md says so.)
FREE = 300
TASK = "limited"
WORKER = ["-m", "duecast.worker", "--app", "tests.faults.limits_app"]


class TaskEnv:
    def __init__(
        self, settings: Settings, env: dict[str, str], sql: pymysql.cursors.Cursor, tmp: Path
    ) -> None:
        self.settings = settings
        self.env = env
        self.sql = sql
        self.exec_log = tmp / "exec.log"
        self.env["DUECAST_TEST_EXEC_LOG"] = str(self.exec_log)
        self.enqueuer = Enqueuer(settings, None)

    def left(self, task: str | None = None) -> int:
        """Jobs (of `task`) not finished yet (pending, or in a run): done jobs are deleted."""
        where = "" if task is None else " WHERE task = %s"
        self.sql.execute(
            f"SELECT COUNT(*) FROM `{self.settings.jobs.table}`{where}", (task,) if task else None
        )
        return int(self.sql.fetchone()[0])  # type: ignore[index]


@pytest.fixture
def task_env(
    mysql_settings: MySQLSettings, redis_settings: RedisSettings, sql: pymysql.cursors.Cursor, tmp_path: Path
) -> Iterator[Callable[..., TaskEnv]]:
    made: list[Settings] = []

    def make(limits: dict[str, Any], **jobs_extra: Any) -> TaskEnv:
        table = f"jobs_{uuid.uuid4().hex[:8]}"
        jobs = {"table": table, "schedules_table": f"{table}_s", "task_limits": {TASK: limits}, **jobs_extra}
        settings = Settings(mysql=mysql_settings, redis=redis_settings, jobs=jobs)  # type: ignore[arg-type]
        migrate.apply(settings)
        made.append(settings)
        env = {k: v for k, v in os.environ.items() if not k.startswith(_NOT_INHERITED)}
        env.update(
            {
                "DUECAST_MYSQL__DATABASE": mysql_settings.database,
                "DUECAST_REDIS__URL": redis_settings.url.get_secret_value(),
                "DUECAST_REDIS__KEY_PREFIX": redis_settings.key_prefix,
                "DUECAST_JOBS": json.dumps(jobs),
                "DUECAST_DISPATCHER__POLL_INTERVAL_S": "0.05",
                "DUECAST_WORKER__BLOCK_TIMEOUT_S": "0.5",
                "PYTHONUNBUFFERED": "1",
            }
        )
        return TaskEnv(settings, env, sql, tmp_path)

    yield make
    sql.execute(f"DELETE FROM `{DispatcherSettings().limits_table}`")
    sql.execute(f"DELETE FROM `{DispatcherSettings().leases_table}`")
    sql.execute(f"DELETE FROM `{WorkerSettings().registry_table}`")
    for settings in made:
        drop_job_tables(sql, settings.jobs)


def _worker(procs: Procs, env: TaskEnv, name: str, **extra: object) -> Proc:
    return procs.spawn(name, WORKER, {**env.env, **{k: str(v) for k, v in extra.items()}})


def _busiest(starts: list[float]) -> float:
    """Where the busiest 1-s window of `starts` (sorted) begins."""
    best, at, lo = 0, starts[0], 0
    for hi, t in enumerate(starts):
        while starts[lo] <= t - 1.0:
            lo += 1
        if hi - lo + 1 > best:
            best, at = hi - lo + 1, starts[lo]
    return at


def record_claims(env: TaskEnv) -> str:
    """The task's claims: a run of its jobs inserted DISPATCHED, or a pending one taken again (IDLE
    to DISPATCHED). Triggers log each with that statement's NOW(6) and its jobs (a run's start
    overwrites dc_dispatched_at). The log table goes with the test's database."""
    runs, log = env.settings.jobs.runs_table, f"{env.settings.jobs.table}_claims"
    env.sql.execute(f"CREATE TABLE `{log}` (jobs INT NOT NULL, at DATETIME(6) NOT NULL)")
    env.sql.execute(
        f"CREATE TRIGGER `{log}_i` AFTER INSERT ON `{runs}` FOR EACH ROW "
        f"IF NEW.task = '{TASK}' THEN INSERT INTO `{log}` VALUES (NEW.jobs, NOW(6)); END IF"
    )
    env.sql.execute(
        f"CREATE TRIGGER `{log}_u` AFTER UPDATE ON `{runs}` FOR EACH ROW "
        f"IF NEW.task = '{TASK}' AND OLD.dc_state = {IDLE} AND NEW.dc_state = {DISPATCHED} THEN "
        f"INSERT INTO `{log}` VALUES (NEW.jobs, NOW(6)); END IF"
    )
    return log


def claim_times(env: TaskEnv, log: str) -> list[float]:
    """When each claimed job left MySQL: its run's claim time, once per job of the run."""
    env.sql.execute(f"SELECT jobs, UNIX_TIMESTAMP(at) FROM `{log}`")
    return sorted(float(at) for jobs, at in env.sql.fetchall() for _ in range(int(jobs)))


def _leader(env: TaskEnv) -> str:
    env.sql.execute(f"SELECT holder FROM `{DispatcherSettings().leases_table}`")
    row = env.sql.fetchone()
    return str(row[0]) if row else ""


# Alone (scripts/dev test phase 3): handler calls are counted per second against the rate, and
# beside two other fault tests on 2 cores a stalled worker's waiting entries started together
# (118 in one second against 100 once, with the fault tier on 3 processes).
@pytest.mark.alone
def test_a_task_rate_holds_in_every_second_across_three_workers_and_a_leader_kill(
    task_env: Callable[..., TaskEnv], procs: Procs
) -> None:
    # A claim the killed leader committed but never pushed comes back after the visibility timeout.
    env = task_env({"rate_limit_per_s": RATE}, visibility_timeout_s=5)
    log = record_claims(env)
    env.enqueuer.enqueue_many(Job(TASK, i) for i in range(JOBS))
    env.enqueuer.enqueue_many(Job("free", i) for i in range(FREE))  # the same queue, no limit
    workers = [_worker(procs, env, f"w{n}") for n in range(3)]
    # Claims only once every worker pops: entries claimed while they import would start together.
    wait_for(lambda: all(serving(w) for w in workers), 30, "the workers to be serving", procs.check)
    first = procs.spawn("d1", ["-m", "duecast.dispatcher"], env.env)
    wait_for(lambda: f":{first.pid}:" in _leader(env), 20, "the first dispatcher to lead", procs.check)
    procs.spawn("d2", ["-m", "duecast.dispatcher"], env.env)
    wait_for(lambda: env.left("free") == 0, 10, "the unlimited task's jobs to be done", procs.check)
    free_done = time.time()
    wait_for(
        lambda: len(read_calls(env.exec_log)) >= JOBS, 20, "half the task's jobs to be called", procs.check
    )
    procs.kill(first)  # the leader, mid-claim or not: the task's bucket is in MySQL
    killed_at = time.time()
    wait_for(lambda: env.left() == 0, 40, "every job to be done", procs.check)

    # The limit binds claims, where jobs leave MySQL: in any 1-s window at most RATE plus the bucket
    # (RATE / 20) of the task's jobs, counted from each claim's own NOW(6), through the leader's kill,
    # give or take the claims a delay after their reservation moves into the next window (claim_bound).
    claims = claim_times(env, log)
    assert len(claims) >= JOBS
    dispatched = most_in_window(claims)
    assert dispatched <= claim_bound(RATE), f"{dispatched} jobs claimed in one second under {RATE}/s"
    starts = sorted(c.at for c in read_calls(env.exec_log) if c.kind == "S")
    assert len(starts) >= JOBS
    most = most_in_window(starts)
    # Handler starts can bunch a little more when a worker catches up on what waited in Redis:
    # 205-216 in 8 of 9 runs, 227 once under load. The bound is test_limits.py's, 1.15.
    where = _busiest(starts)
    assert most <= RATE * 115 // 100, (
        f"{most} calls in one second under rate_limit_per_s = {RATE}, from {where - starts[0]:.2f}s "
        f"(the leader killed at {killed_at - starts[0]:.2f}s; redelivery at +5s)"
    )
    steady = starts[: int(len(starts) * 0.9)]  # before the stranded claim's redelivery, if any
    span_s = steady[-1] - steady[0]
    assert span_s >= (len(steady) - RATE * 1.1) / RATE, f"{len(steady)} calls in {span_s:.1f}s: no limit"
    per_second = Counter(int(t - steady[0]) for t in steady)
    full = [per_second[s] for s in range(1, int(span_s))]  # whole seconds, the first and last left out
    # Met, not just bounded: 197-207/s on a quiet machine. On one loaded by other work (load average
    # 8 on 2 cores) the dispatcher's claims came further apart than the default bucket holds (50 ms)
    # and seconds of 100-170 were seen: under-used, never exceeded (docs/protecting.md).
    assert statistics.median(full) >= RATE * 0.7, f"per-second calls {full}: the limit was not met"
    # The other task of the queue is not held back: its jobs were done while most of the limited
    # task's still waited for their turn.
    free_s = free_done - starts[0]  # (the poll that saw it done: up to a tenth of a second late)
    assert free_s < span_s / 2, f"the unlimited task took {free_s:.1f}s, the limited one {span_s:.1f}s"
    print(f"\ntask rate {RATE}/s: busiest 1-s window of claimed jobs {dispatched}, of starts {most}")
    print(f"starts per second {full}; {FREE} jobs of another")
    took_s = starts[-1] - starts[0]
    print(f"task of the queue done in {free_s:.1f}s, the limited task's {len(starts)} in {took_s:.1f}s")


def test_a_task_max_running_is_never_exceeded_through_a_worker_sigkill(
    task_env: Callable[..., TaskEnv], procs: Procs
) -> None:
    limit = 10
    env = task_env({"max_running": limit}, lease_s=9)
    env.enqueuer.enqueue_many(Job(TASK, i) for i in range(150))
    extra = {"DUECAST_TEST_ROW_DELAY_MS": 300, "DUECAST_WORKER__HEARTBEAT_S": 0.5}
    victim = _worker(procs, env, "w1", **extra)
    _worker(procs, env, "w2", **extra)
    procs.spawn("dispatcher", ["-m", "duecast.dispatcher"], env.env)
    wait_for(
        lambda: sum(1 for c in read_calls(env.exec_log) if c.kind == "S" and c.pid == victim.pid) >= 5,
        30,
        "the victim to be running calls",
        procs.check,
    )
    procs.kill(victim)
    killed_at = time.time()
    wait_for(lambda: env.left() == 0, 60, "every job to be done after the kill", procs.check)

    calls = read_calls(env.exec_log)
    assert len({c.id for c in calls if c.kind == "E"}) == 150, "a job was never run to its end"
    assert {c.id for c in calls if c.kind == "S" and c.pid == victim.pid} - {
        c.id for c in calls if c.kind == "E" and c.pid == victim.pid
    }, "the kill interrupted no call: the test proved nothing about slots coming back"
    most = most_running(calls, {victim.pid: killed_at})
    assert most <= limit, f"{most} calls running at once under max_running = {limit}"
    assert most >= limit - 2, f"at most {most} running at once: max_running = {limit} never bound"
    print(f"\ntask max_running {limit}: at most {most} running at once, through a worker's SIGKILL")
