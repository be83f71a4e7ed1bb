"""Fixtures the ops tests share: settings_for (one source's Settings) and make_web/web (a dashboard app)."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pymysql
import pytest

from duecast.cli.history import History
from duecast.cli.sampler import Sampler
from duecast.cli.web.app import create_app
from duecast.cli.web.context import WebContext
from duecast.shared.api.enqueue import Enqueuer
from duecast.shared.fanout.client import connect_redis
from duecast.shared.queries.limits import limits_table_ddl
from duecast.shared.queries.pauses import PAUSES_DDL
from duecast.shared.settings import (
    DispatcherSettings,
    MySQLSettings,
    RedisSettings,
    Settings,
    SourceSettings,
    WorkerSettings,
)
from duecast.shared.storage.admin import migrate
from duecast.shared.storage.schema import leases_table_ddl, workers_table_ddl
from tests.integration import jobs_app
from tests.integration.conftest import create_table, source_fields
from tests.integration.ops.web_helpers import TOKEN, Web, web_settings


@pytest.fixture
def settings_for(
    mysql_settings: MySQLSettings, redis_settings: RedisSettings, sql: pymysql.cursors.Cursor
) -> Callable[..., Settings]:
    """settings_for(table, kind, **source overrides, jobs=...) -> Settings with that one source.

    The dispatcher's leases and limits tables already exist (so plans show only what a test is about)."""
    sql.execute(leases_table_ddl(DispatcherSettings().leases_table))
    sql.execute(workers_table_ddl(WorkerSettings().registry_table))
    sql.execute(limits_table_ddl(DispatcherSettings().limits_table))
    sql.execute(PAUSES_DDL)

    def make(table: str, kind: str = "rescan", jobs: Any = None, **overrides: object) -> Settings:
        fields = {"name": table.lower(), "table": table, **source_fields(kind), **overrides}
        return Settings(
            mysql=mysql_settings,
            redis=redis_settings,
            sources=[SourceSettings(**fields)],  # type: ignore[arg-type]
            jobs=jobs or {"enabled": False},
        )

    return make


@pytest.fixture
def make_web(
    mysql_settings: MySQLSettings, redis_settings: RedisSettings, sql: pymysql.cursors.Cursor
) -> Iterator[Callable[..., Web]]:
    tables: list[str] = []

    def make(token: str | None = TOKEN) -> Web:
        table = f"users_{uuid.uuid4().hex[:8]}"
        create_table(sql, table, "rescan", 50)
        settings = web_settings(mysql_settings, redis_settings, table, token)
        tables.extend([table, settings.jobs.table, settings.jobs.schedules_table])
        migrate.apply(settings)
        sampler = Sampler.connect(settings)
        woken: list[int] = []
        ctx = WebContext(settings, History(100), settings.jobs.schedules, wake=lambda: woken.append(1))
        enqueuer = Enqueuer(settings, connect_redis(settings.redis), jobs_app.handlers.task_names)
        jobs_app.RUNS.clear()
        return Web(settings, ctx, create_app(ctx).test_client(), sampler, sql, enqueuer, woken)

    yield make
    for table in tables:
        sql.execute(f"DROP TABLE IF EXISTS `{table}`")


@pytest.fixture
def web(make_web: Callable[..., Web]) -> Web:
    return make_web()
