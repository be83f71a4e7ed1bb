"""A poison job that SIGKILLs every worker that runs it ends `dead` after jobs.max_interruptions
interruptions, while the healthy jobs around it all complete: real dispatcher and worker processes,
a supervisor loop in the test that restarts dead workers (as systemd or Kubernetes would).

Time passes by back-dating the dead worker's leases in SQL, never by waiting a lease out.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pymysql
import pytest

from duecast.admin import migrate
from duecast.shared.api.enqueue import Enqueuer, Job
from duecast.shared.settings import MySQLSettings, RedisSettings, Settings
from duecast.shared.states import State
from tests.faults.conftest import _NOT_INHERITED
from tests.faults.procs import Proc, Procs, wait_for

pytestmark = pytest.mark.faults

HEALTHY = 400
MAX_INTERRUPTIONS = 3
WAIT_S = 60.0


@pytest.fixture
def jobs_env(
    mysql_settings: MySQLSettings, redis_settings: RedisSettings, sql: pymysql.cursors.Cursor
) -> Iterator[tuple[Settings, dict[str, str]]]:
    table = f"jobs_{uuid.uuid4().hex[:8]}"
    jobs = {
        "table": table,
        "schedules_table": f"{table}_s",
        "max_interruptions": MAX_INTERRUPTIONS,
        "lease_s": 60,
    }
    settings = Settings(mysql=mysql_settings, redis=redis_settings, jobs=jobs)  # type: ignore[arg-type]
    migrate.apply(settings)
    env = {k: v for k, v in os.environ.items() if not k.startswith(_NOT_INHERITED)}
    env.update(
        {
            "DUECAST_MYSQL__DATABASE": mysql_settings.database,
            "DUECAST_REDIS__URL": redis_settings.url.get_secret_value(),
            "DUECAST_REDIS__KEY_PREFIX": redis_settings.key_prefix,
            "DUECAST_JOBS": json.dumps(jobs),
            "DUECAST_DISPATCHER__POLL_INTERVAL_S": "0.05",
            "DUECAST_DISPATCHER__SWEEP_INTERVAL_S": "0.2",
            "DUECAST_WORKER__POP_BATCH": "50",
            "DUECAST_WORKER__BLOCK_TIMEOUT_S": "0.5",
            "PYTHONUNBUFFERED": "1",
        }
    )
    yield settings, env
    sql.execute(f"DROP TABLE IF EXISTS `{table}`, `{table}_s`")


def test_a_job_that_kills_its_worker_is_dead_after_max_interruptions_while_others_flow(
    jobs_env: tuple[Settings, dict[str, str]], procs: Procs, sql: pymysql.cursors.Cursor, tmp_path: Path
) -> None:
    settings, env = jobs_env
    table = settings.jobs.table
    enqueuer = Enqueuer(settings, None)
    half = HEALTHY // 2
    enqueuer.enqueue_many([Job("record", i) for i in range(half)])
    poison = enqueuer.enqueue("kill_worker", "poison")
    enqueuer.enqueue_many([Job("record", i) for i in range(half, HEALTHY)])

    def query(stmt: str, args: object = None) -> list[tuple[object, ...]]:
        sql.execute(stmt.format(t=f"`{table}`"), args)
        return list(sql.fetchall())

    def poison_state() -> tuple[int, int]:
        ((state, interruptions),) = query("SELECT dc_state, interruptions FROM {t} WHERE id = %s", (poison,))
        return int(state), int(interruptions)

    procs.spawn("dispatcher", ["-m", "duecast.dispatcher"], env)
    deaths = 0

    def start_worker(n: int) -> Proc:  # may_exit: the poison job is expected to kill it
        return procs.spawn(
            f"worker-{n}", ["-m", "duecast.worker", "--app", "tests.integration.jobs_app"], env, may_exit=True
        )

    worker = start_worker(0)
    while poison_state()[0] != State.DEAD:
        wait_for(
            lambda w=worker: not w.alive() or poison_state()[0] == State.DEAD,
            WAIT_S,
            "a worker death",
            procs.check,
        )
        if worker.alive():
            break
        deaths += 1
        assert deaths <= MAX_INTERRUPTIONS, "the poison job ran more often than max_interruptions"
        # The supervisor restarts it; time passes for the dead worker's leases only.
        query(
            "UPDATE {t} SET lease_until = NOW(6) - INTERVAL 1 SECOND WHERE dc_state = %s AND worker LIKE %s",
            (int(State.RUNNING), f"%:{worker.pid}"),
        )
        worker = start_worker(deaths)

    wait_for(
        lambda: query("SELECT COUNT(*) FROM {t}")[0][0] == 1,
        WAIT_S,
        "every healthy job to finish",
        procs.check,
    )
    assert deaths == MAX_INTERRUPTIONS
    ((state, interruptions, errors, error),) = query(
        "SELECT dc_state, interruptions, errors, last_error FROM {t} WHERE id = %s", (poison,)
    )
    assert (state, interruptions, errors) == (State.DEAD, MAX_INTERRUPTIONS, 0)
    assert f"interrupted {MAX_INTERRUPTIONS} times" in str(error)
    assert worker.alive(), "the last worker never ran the poison job"
