"""Fixtures for the topic integration tests: a fresh, migrated set of topic tables per env."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pymysql
import pytest

from duecast.shared.settings import MySQLSettings, RedisSettings, Settings
from duecast.shared.storage.admin import migrate
from tests.integration import topics_app
from tests.integration.topics.topics_env import APP, TopicsEnv, groups


@pytest.fixture
def make_env(
    mysql_settings: MySQLSettings, redis_settings: RedisSettings, sql: pymysql.cursors.Cursor
) -> Iterator[Any]:
    made: list[TopicsEnv] = []

    def make(**topics: Any) -> TopicsEnv:
        prefix = f"t{uuid.uuid4().hex[:8]}_"
        settings = Settings(
            mysql=mysql_settings,
            redis=redis_settings,
            jobs={"enabled": False},  # type: ignore[arg-type]
            topics={  # type: ignore[arg-type]
                "table_prefix": prefix,
                "names": ["orders", "ledger"],
                "groups": groups(),
                "retry_delays_s": [10, 30, 60],
                **topics,
            },
            worker={"app": APP, "block_timeout_s": 0.1, "error_backoff_s": 0.05},  # type: ignore[arg-type]
            dispatcher={"poll_interval_s": 0.05},  # type: ignore[arg-type]
        )
        migrate.apply(settings)
        env = TopicsEnv(settings, sql)
        made.append(env)
        return env

    topics_app.RUNS.clear()
    yield make
    for env in made:
        env.publisher.db.close()
        for kind in ("topics", "messages", "groups", "deliveries", "attempts", "members"):
            sql.execute(f"DROP TABLE IF EXISTS {env.table(kind)}")


@pytest.fixture
def env(make_env: Any) -> TopicsEnv:
    return make_env()  # type: ignore[no-any-return]
