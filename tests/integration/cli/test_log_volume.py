"""A worker whose every handler call fails keeps its log small: two lines per cause per 10 s, with counts.

Real processes (`duecast dispatcher --drain`, `duecast worker --drain`) and the default human format;
every job's handler raises the same error, as when a downstream service is down.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator

import pymysql
import pytest

from duecast.shared.api.enqueue import Enqueuer
from duecast.shared.process.logs import REPEAT_BURST, REPEAT_INTERVAL_S
from duecast.shared.settings import MySQLSettings, RedisSettings
from duecast.shared.states import State
from tests.integration.cli.jobs_cli_env import JobsEnv, jobs_cli_env, run_duecast

pytestmark = pytest.mark.integration

JOBS = 400


@pytest.fixture
def jobs_env(
    mysql_settings: MySQLSettings, redis_settings: RedisSettings, sql: pymysql.cursors.Cursor
) -> Iterator[JobsEnv]:
    with jobs_cli_env(mysql_settings, redis_settings, sql, "human") as env:
        yield env


def run(env: dict[str, str], *args: str) -> str:
    return run_duecast(env, *args, timeout_s=120)


def test_a_worker_whose_every_call_fails_logs_each_cause_twice_per_interval_at_most(
    jobs_env: tuple[dict[str, str], Enqueuer, str], sql: pymysql.cursors.Cursor
) -> None:
    env, enqueuer, table = jobs_env
    for n in range(JOBS):
        enqueuer.enqueue("fail_always", f"down-{n}", max_attempts=1)

    run(env, "dispatcher", "--drain")
    started = time.monotonic()
    log = run(env, "worker", "--drain", "--app", "tests.integration.jobs_app")
    took_s = time.monotonic() - started

    sql.execute(f"SELECT COUNT(*) FROM `{table}` WHERE dc_state = %s", (int(State.DEAD),))
    assert sql.fetchone() == (JOBS,)  # every job ran, failed and was dead-lettered
    most = REPEAT_BURST * (1 + int(took_s // REPEAT_INTERVAL_S))  # lines a cause may write
    failed = [line for line in log.splitlines() if " handler failed for jobs.default " in line]
    dead = [line for line in log.splitlines() if re.search(r" job \d+ dead after ", line)]
    assert 1 <= len(failed) <= most, log[-3000:]
    assert 1 <= len(dead) <= most
    assert log.count("RuntimeError: boom down-") == len(failed)  # one traceback per line shown
    # 400 tracebacks of ~1 KB would be ~400 KB; the rate-limited log is a few lines.
    assert len(log.encode()) < 20_000 + 5_000 * most, log[-3000:]
