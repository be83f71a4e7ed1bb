"""Fixtures for the job integration tests: a fresh, migrated jobs table per test."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pymysql
import pytest

from duecast.shared.settings import MySQLSettings, RedisSettings, Settings
from duecast.shared.storage.admin import migrate
from tests.integration import jobs_app
from tests.integration.jobs.jobs_env import APP, JobsEnv


@pytest.fixture
def env(
    mysql_settings: MySQLSettings, redis_settings: RedisSettings, sql: pymysql.cursors.Cursor
) -> Iterator[JobsEnv]:
    table = f"jobs_{uuid.uuid4().hex[:8]}"
    settings = Settings(
        mysql=mysql_settings,
        redis=redis_settings,
        jobs={  # type: ignore[arg-type]
            "table": table,
            "schedules_table": f"{table}_s",
            "queues": ["critical", "default"],
            "max_attempts": 5,
            "retry_base_s": 10,
        },
        worker={"app": APP, "block_timeout_s": 0.1, "error_backoff_s": 0.05},  # type: ignore[arg-type]
        dispatcher={"poll_interval_s": 0.05},  # type: ignore[arg-type]
    )
    migrate.apply(settings)
    jobs_app.RUNS.clear()
    yield JobsEnv(settings, sql)
    sql.execute(f"DROP TABLE IF EXISTS `{table}`, `{table}_s`, `{table}_runs`, `{table}_cursors`")
