"""A worker whose app has a handler for a source this deployment does not configure serves the
configured ones and names the other in one warning (issue 16.4: it died at start, with a traceback
in the report). The real command, as a user types it, against real MariaDB and Redis."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pymysql
import pytest

from duecast.dispatcher.main import serve as serve_dispatcher
from duecast.shared.api.enqueue import Enqueuer, Job
from duecast.shared.fanout.client import connect_redis
from duecast.shared.settings import MySQLSettings, RedisSettings, Settings
from duecast.shared.storage.admin import migrate

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[3]
APP = """
from pathlib import Path
from duecast import Registry

handlers = Registry()

@handlers.task("hello")
def hello(payload):
    Path(payload["to"]).write_text("ran")

@handlers.row("ubs_ranges")  # a source of another deployment: not configured here
def check(row):
    return None
"""


@pytest.fixture
def settings(
    mysql_settings: MySQLSettings, redis_settings: RedisSettings, sql: pymysql.cursors.Cursor
) -> Iterator[Settings]:
    table = f"jobs_{uuid.uuid4().hex[:8]}"
    s = Settings(
        mysql=mysql_settings,
        redis=redis_settings,
        jobs={"table": table, "schedules_table": f"{table}_s"},  # type: ignore[arg-type]
    )
    migrate.apply(s)
    yield s
    sql.execute(f"DROP TABLE IF EXISTS `{table}`, `{table}_s`, `{table}_runs`, `{table}_cursors`")


def _worker(settings: Settings, app_dir: Path) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("DUECAST_")}
    servers = {k: v for k, v in os.environ.items() if k.startswith(("DUECAST_MYSQL__", "DUECAST_REDIS__"))}
    env = {
        **clean,
        **servers,
        "DUECAST_MYSQL__DATABASE": settings.mysql.database,
        "DUECAST_REDIS__KEY_PREFIX": settings.redis.key_prefix,
        "DUECAST_JOBS__TABLE": settings.jobs.table,
        "DUECAST_JOBS__SCHEDULES_TABLE": settings.jobs.schedules_table,
        "PYTHONPATH": f"{ROOT}{os.pathsep}{app_dir}",
    }
    return subprocess.run(
        [sys.executable, "-m", "duecast", "worker", "--app", "unconfigured_app", "--drain"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_the_worker_serves_the_configured_sources_and_warns_once_about_the_other(
    settings: Settings, tmp_path: Path
) -> None:
    (tmp_path / "unconfigured_app.py").write_text(APP)
    ran = tmp_path / "ran"
    enqueuer = Enqueuer(settings, connect_redis(settings.redis), tasks=["hello"])
    enqueuer.enqueue_many([Job("hello", {"to": str(ran)})])
    serve_dispatcher(settings, threading.Event(), drain=True)  # its entry is in Redis now

    done = _worker(settings, tmp_path)

    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    assert "Traceback" not in output
    assert ran.read_text() == "ran", "the configured queue was served"
    (warning,) = [line for line in output.splitlines() if "ubs_ranges" in line]
    assert "WARNING" in warning
    assert "not configured" in warning
    assert "[[sources]]" in warning
