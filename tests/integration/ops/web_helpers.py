"""Helpers the dashboard tests share: the token, a Web bundle for one app, its settings and chart reads."""

from __future__ import annotations

import re
import threading
import uuid
from dataclasses import dataclass

import pymysql
from flask.testing import FlaskClient

from duecast.cli.sampler import Sampler
from duecast.cli.web.context import WebContext
from duecast.dispatcher.main import serve as serve_dispatcher
from duecast.shared.api.enqueue import Enqueuer
from duecast.shared.settings import MySQLSettings, RedisSettings, Settings
from duecast.worker.main import serve as serve_worker
from tests.integration.conftest import source_fields

TOKEN = "test-token-0123456789"


@dataclass
class Web:
    settings: Settings
    ctx: WebContext
    client: FlaskClient
    sampler: Sampler
    sql: pymysql.cursors.Cursor
    enqueuer: Enqueuer
    woken: list[int]

    @property
    def jobs_table(self) -> str:
        return self.settings.jobs.table

    def read(self, n: int = 1) -> None:
        for _ in range(n):
            self.ctx.history.add(self.sampler.read())

    def run_jobs(self) -> None:
        serve_dispatcher(self.settings, threading.Event(), drain=True)
        serve_worker(self.settings, threading.Event(), drain=True)

    def state(self, job_id: int) -> int | None:
        self.sql.execute(f"SELECT dc_state FROM `{self.jobs_table}` WHERE id = %s", (job_id,))
        row = self.sql.fetchone()
        return None if row is None else int(row[0])

    def page(self, path: str, status: int = 200) -> str:
        resp = self.client.get(path)
        assert resp.status_code == status, resp.get_data(as_text=True)
        return resp.get_data(as_text=True)


def web_settings(
    mysql: MySQLSettings, redis: RedisSettings, table: str, token: str | None = TOKEN, **web: object
) -> Settings:
    jobs_table = f"jobs_{uuid.uuid4().hex[:8]}"
    return Settings(
        mysql=mysql,
        redis=redis,
        sources=[{"name": "users", "table": table, **source_fields("rescan")}],  # type: ignore[list-item]
        jobs={  # type: ignore[arg-type]
            "table": jobs_table,
            "schedules_table": f"{jobs_table}_s",
            "queues": ["default", "mail"],
            "schedules": [{"name": "nightly", "task": "record", "cron": "0 3 * * *"}],
        },
        worker={"app": "tests.integration.jobs_app", "block_timeout_s": 0.1},  # type: ignore[arg-type]
        dispatcher={"poll_interval_s": 0.05},  # type: ignore[arg-type]
        web={"token": token, "refresh_s": 0, "port": 0, "host": "127.0.0.1", **web},  # type: ignore[arg-type]
    )


def points(html: str, chart_id: str) -> int:
    """The data-points of the chart in figure `chart_id`."""
    found = re.search(rf'id="{chart_id}".*?data-points="(\d+)"', html, re.S)
    assert found, f"no chart {chart_id}"
    return int(found.group(1))
