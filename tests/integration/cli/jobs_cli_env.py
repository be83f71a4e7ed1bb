"""A jobs table of a test's own and the environment for `duecast ...` subprocesses that use it, in a
given log format: what the JSON-log and log-volume tests both start from."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pymysql

from duecast.shared.api.enqueue import Enqueuer
from duecast.shared.fanout.client import connect_redis
from duecast.shared.settings import MySQLSettings, RedisSettings, Settings
from duecast.shared.storage.admin import migrate

JobsEnv = tuple[dict[str, str], Enqueuer, str]
ROOT = Path(__file__).resolve().parents[3]


@contextmanager
def jobs_cli_env(
    mysql: MySQLSettings, redis: RedisSettings, sql: pymysql.cursors.Cursor, log_format: str
) -> Iterator[JobsEnv]:
    table = f"jobs_{uuid.uuid4().hex[:8]}"
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("DUECAST_JOBS", "DUECAST_SOURCES"))},
        "DUECAST_MYSQL__DATABASE": mysql.database,
        "DUECAST_REDIS__KEY_PREFIX": redis.key_prefix,
        "DUECAST_JOBS__TABLE": table,
        "DUECAST_JOBS__SCHEDULES_TABLE": f"{table}_s",
        "DUECAST_LOG_FORMAT": log_format,
        "DUECAST_WORKER__BLOCK_TIMEOUT_S": "0.1",
    }
    jobs = {"table": table, "schedules_table": f"{table}_s"}
    settings = Settings(mysql=mysql, redis=redis, jobs=jobs)  # type: ignore[arg-type]
    migrate.apply(settings)
    yield env, Enqueuer(settings, connect_redis(redis)), table
    sql.execute(f"DROP TABLE IF EXISTS `{table}`, `{table}_s`, `{table}_runs`, `{table}_cursors`")


def run_duecast(env: dict[str, str], *args: str, timeout_s: float = 60) -> str:
    """`duecast ARGS...` in that environment, which must succeed; returns what it logged (stderr)."""
    done = subprocess.run(
        [sys.executable, "-m", "duecast", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-5000:]
    return done.stderr
