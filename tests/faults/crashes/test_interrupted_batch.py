"""Issue 16.1: a worker SIGKILLed holding a full batch (2,000 jobs, or 2,000 messages of a cluster
group). Every one of them is then a suspect; they must run again in groups, not one per batch, and
no entry may cost a claim of its own again and again (the churn: millions of claims and stale
entries for a few thousand rows). Real dispatcher and worker processes.

A job's lease is its run's (tests/faults/runs.py), a message's its delivery row's. Time passes by
back-dating the dead worker's leases in SQL, never by waiting a lease out.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pymysql
import pytest
import redis

from duecast.shared.api.enqueue import Enqueuer, Job
from duecast.shared.api.publish import Publish, Publisher
from duecast.shared.fanout.keys import Keys
from duecast.shared.policy import suspect_group_size
from duecast.shared.settings import MySQLSettings, RedisSettings, Settings
from duecast.shared.states import State
from duecast.shared.storage.admin import migrate
from tests.faults.conftest import _NOT_INHERITED
from tests.faults.procs import Proc, Procs, wait_for
from tests.faults.runs import drop_job_tables, expire_runs, running_jobs, runs, runs_made

pytestmark = pytest.mark.faults

# The sweep requeuing the dead worker's rows runs while the new worker starts and acks them: InnoDB
# may pick the sweep as a deadlock victim, which its loop retries at once (one WARNING line).
SWEEP_MEETS_STARTS = ("TransientError",)
BATCH = 2000  # the default pop and claim batch
WAIT_S = 90.0
RECOVER_S = 30.0  # the issue's target, from the leases' end (the kill, plus lease_s)


@pytest.fixture
def base_env(mysql_settings: MySQLSettings, redis_settings: RedisSettings, tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(_NOT_INHERITED)}
    env.update(
        {
            "DUECAST_MYSQL__DATABASE": mysql_settings.database,
            "DUECAST_REDIS__URL": redis_settings.url.get_secret_value(),
            # Its own prefix, so that the Redis stats it reads count this test's work only.
            "DUECAST_REDIS__KEY_PREFIX": f"{redis_settings.key_prefix}-{uuid.uuid4().hex[:6]}",
            "DUECAST_DISPATCHER__LEADER_LEASE_S": "3",
            "DUECAST_DISPATCHER__POLL_INTERVAL_S": "0.05",
            "DUECAST_DISPATCHER__SWEEP_INTERVAL_S": "0.2",
            "DUECAST_WORKER__BLOCK_TIMEOUT_S": "0.5",
            "DUECAST_TEST_GATE": str(tmp_path / "gate"),
            "DUECAST_TEST_BATCH_MARKER": str(tmp_path / "parked.json"),
            "DUECAST_TEST_EXEC_LOG": str(tmp_path / "exec.log"),
            "PYTHONUNBUFFERED": "1",
        }
    )
    return env


def stats(env: dict[str, str], source: str) -> dict[str, int]:
    client = redis.Redis.from_url(env["DUECAST_REDIS__URL"])
    raw = client.hgetall(Keys(env["DUECAST_REDIS__KEY_PREFIX"]).stats(source))
    return {k.decode(): int(v) for k, v in raw.items()}


def recover(
    procs: Procs,
    dispatcher: Proc,
    query: Callable[[str], list[tuple[Any, ...]]],
    *,
    running: Callable[[], int],
    expire: Callable[[], object],
    left: Callable[[], int],
    spawn: Callable[[str], Any],
    gate: Path,
) -> float:
    """With the whole batch RUNNING under the first worker (`running`: how many units are): kill it,
    end its leases (`expire`), start another worker; the seconds from the leases' end until `left`
    (units not done) is 0."""
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
    doomed = spawn("doomed")
    wait_for(lambda: running() == BATCH, WAIT_S, "the first worker to start the whole batch", procs.check)
    procs.kill(doomed)
    gate.touch()  # the parked handler returns at once from now on
    expire()
    leases_out = time.monotonic()
    spawn("survivor")
    wait_for(lambda: left() == 0, WAIT_S, "every interrupted unit to be done", procs.check)
    return time.monotonic() - leases_out


@pytest.fixture
def jobs_settings(
    mysql_settings: MySQLSettings, redis_settings: RedisSettings, sql: pymysql.cursors.Cursor
) -> Iterator[tuple[Settings, dict[str, Any]]]:
    table = f"jobs_{uuid.uuid4().hex[:8]}"
    jobs = {"table": table, "schedules_table": f"{table}_s", "lease_s": 60, "retention_s": 3600}
    settings = Settings(mysql=mysql_settings, redis=redis_settings, jobs=jobs)  # type: ignore[arg-type]
    migrate.apply(settings)
    yield settings, jobs
    drop_job_tables(sql, settings.jobs)


def test_a_killed_batch_of_jobs_runs_again_in_groups_without_claim_churn(
    jobs_settings: tuple[Settings, dict[str, Any]],
    base_env: dict[str, str],
    procs: Procs,
    sql: pymysql.cursors.Cursor,
) -> None:
    settings, jobs = jobs_settings
    table = f"`{settings.jobs.table}`"
    env = {**base_env, "DUECAST_JOBS": json.dumps(jobs)}
    Enqueuer(settings, None).enqueue_many([Job("park", i) for i in range(BATCH)])

    def query(stmt: str) -> list[tuple[Any, ...]]:
        sql.execute(stmt)
        return list(sql.fetchall())

    def spawn(name: str) -> Any:
        return procs.spawn(name, ["-m", "duecast.worker", "--app", "tests.integration.jobs_app"], env)

    dispatcher = procs.spawn("dispatcher", ["-m", "duecast.dispatcher"], env, allow=SWEEP_MEETS_STARTS)
    # A job runs as a member of a run: the batch is running when its runs are, and their leases
    # are the runs' rows'. A done job's row is kept (retention_s), so "left" is read on the jobs.
    took_s = recover(
        procs,
        dispatcher,
        query,
        running=lambda: len(running_jobs(sql, settings.jobs)),
        expire=lambda: expire_runs(sql, settings.jobs),
        left=lambda: query(f"SELECT COUNT(*) FROM {table} WHERE dc_state <> {int(State.DONE)}")[0][0],
        spawn=spawn,
        gate=Path(env["DUECAST_TEST_GATE"]),
    )
    print(f"every interrupted job done {took_s:.1f}s after the leases ran out")

    # Each job: in one run interrupted, then in one run done (dc_attempt counts a job's ended runs;
    # the interruption counted once): no churn.
    assert query(
        f"SELECT MIN(dc_attempt), MAX(dc_attempt), MIN(interruptions), MAX(interruptions) FROM {table}"
    ) == [(2, 2, 1, 1)]
    counts = stats(env, "jobs.default")
    # Every job was claimed twice (the dispatcher counts a claim's jobs): in its first run and in its
    # run as a suspect, no run ever dispatched again. The suspects ran in groups: the batch's clean
    # runs, then its suspects in runs of up to suspect_group_size (a claim that met only part of a
    # group at its end may cut one in two).
    made = runs_made(sql, settings.jobs)
    clean = -(-BATCH // settings.jobs.run_size)
    groups = -(-BATCH // suspect_group_size(1, settings.jobs.max_interruptions))
    assert counts.get("claimed", 0) == 2 * BATCH
    assert clean + groups <= made <= clean + 2 * groups, made
    assert counts.get("stale_entries", 0) == 0
    assert runs(sql, settings.jobs) == []  # every run ended with its last member
    assert took_s < RECOVER_S


def test_a_killed_batch_of_a_cluster_group_runs_again_in_groups_without_claim_churn(
    mysql_settings: MySQLSettings,
    redis_settings: RedisSettings,
    base_env: dict[str, str],
    procs: Procs,
    sql: pymysql.cursors.Cursor,
) -> None:
    prefix = f"f{uuid.uuid4().hex[:8]}_"
    effects = f"{prefix}effects"
    sql.execute(f"CREATE TABLE `{effects}` (grp VARCHAR(32), msg BIGINT, attempt INT, pid INT)")
    topics = {
        "table_prefix": prefix,
        "names": ["orders"],
        "lease_s": 60,
        "groups": [{"topic": "orders", "name": "billing", "start": "earliest"}],
    }
    settings = Settings(
        mysql=mysql_settings,
        redis=redis_settings,
        jobs={"enabled": False},  # type: ignore[arg-type]
        topics=topics,  # type: ignore[arg-type]
    )
    migrate.apply(settings)
    deliveries = f"`{settings.topics.table('deliveries')}`"
    try:
        env = {k: v for k, v in base_env.items() if not k.startswith("DUECAST_TOPICS")}
        env.update(
            {
                "DUECAST_JOBS__ENABLED": "false",
                "DUECAST_TOPICS": json.dumps(topics),
                "DUECAST_TEST_EFFECTS": effects,
            }
        )
        Publisher(settings, None).publish_many(
            Publish("orders", {"park": "billing"} if n == 1 else {"n": n}) for n in range(1, BATCH + 1)
        )

        def query(stmt: str) -> list[tuple[Any, ...]]:
            sql.execute(stmt)
            return list(sql.fetchall())

        args = [
            "-m",
            "duecast.worker",
            "--app",
            "tests.faults.topics_app",
            "--source",
            "topics.orders-billing",
        ]
        dispatcher = procs.spawn("dispatcher", ["-m", "duecast.dispatcher"], env, allow=SWEEP_MEETS_STARTS)
        running, done = int(State.RUNNING), int(State.DONE)
        took_s = recover(
            procs,
            dispatcher,
            query,
            running=lambda: query(f"SELECT COUNT(*) FROM {deliveries} WHERE dc_state = {running}")[0][0],
            expire=lambda: query(
                f"UPDATE {deliveries} SET lease_until = NOW(6) - INTERVAL 1 SECOND WHERE dc_state = {running}"
            ),
            left=lambda: query(f"SELECT COUNT(*) FROM {deliveries} WHERE dc_state <> {done}")[0][0],
            spawn=lambda name: procs.spawn(name, args, env),
            gate=Path(env["DUECAST_TEST_GATE"]),
        )
        print(f"every interrupted message done {took_s:.1f}s after the leases ran out")

        assert query(
            "SELECT MIN(dc_attempt), MAX(dc_attempt), MIN(interruptions), MAX(interruptions) "
            f"FROM {deliveries}"
        ) == [(2, 2, 1, 1)]
        counts = stats(env, "topics.orders-billing")
        assert counts.get("stale_entries", 0) == 0
        assert counts.get("claimed", 0) == 2 * BATCH  # materialised once, claimed once again
        assert took_s < RECOVER_S
    finally:
        tables = [effects] + [settings.topics.table(k) for k in ("topics", "messages", "groups")]
        tables += [settings.topics.table(k) for k in ("deliveries", "attempts", "members")]
        sql.execute("DROP TABLE IF EXISTS " + ", ".join(f"`{t}`" for t in tables))
