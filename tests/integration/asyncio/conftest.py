"""Fixtures for the async handler tests: a migrated jobs table and the async app's tally."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pymysql
import pytest

from duecast.admin import migrate
from duecast.shared.settings import MySQLSettings, RedisSettings, Settings
from tests.integration import async_app
from tests.integration.jobs.jobs_env import JobsEnv

APP = "tests.integration.async_app"


@pytest.fixture
def env(
    mysql_settings: MySQLSettings, redis_settings: RedisSettings, sql: pymysql.cursors.Cursor
) -> Iterator[JobsEnv]:
    table = f"jobs_{uuid.uuid4().hex[:8]}"
    settings = Settings(
        mysql=mysql_settings,
        redis=redis_settings,
        jobs={"table": table, "schedules_table": f"{table}_s", "retry_base_s": 30},  # type: ignore[arg-type]
        worker={"app": APP, "block_timeout_s": 0.1, "error_backoff_s": 0.05, "concurrency": 4},  # type: ignore[arg-type]
        dispatcher={"poll_interval_s": 0.05},  # type: ignore[arg-type]
    )
    migrate.apply(settings)
    async_app.TALLY.reset()
    yield JobsEnv(settings, sql, tasks=async_app.handlers.task_names)
    sql.execute(f"DROP TABLE IF EXISTS `{table}`, `{table}_s`")
