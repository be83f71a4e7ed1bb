"""Browser tier: the dashboard in a real headless Chromium (Debian's `chromium`, driven by Playwright
with executable_path: no browser download), against a live system on real MariaDB and Redis.

Without Chromium (or the playwright package) the tests skip and say why, except in CI (CI=true),
where that is a failure: CI must run them. scripts/dev installs chromium when it runs as root.
"""

from __future__ import annotations

import os
import shutil
import threading
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pymysql
import pytest

from duecast.cli.history import History
from duecast.cli.sampler import Sampler
from duecast.cli.web.context import WebContext
from duecast.cli.web.serve import running as serve_web
from duecast.dispatcher.main import serve as serve_dispatcher
from duecast.shared.api.enqueue import Enqueuer
from duecast.shared.fanout.client import connect_redis
from duecast.shared.settings import MySQLSettings, RedisSettings, Settings
from duecast.shared.storage.admin import migrate
from duecast.worker.main import serve as serve_worker
from tests.browser import app
from tests.integration.conftest import create_table

CHROMIUM = os.environ.get("DUECAST_CHROMIUM", "/usr/bin/chromium")
TOKEN = "browser-test-token-0123"
# Set to a directory (docs/img) to save screenshots of the main pages while the tests run.
SHOTS = os.environ.get("DUECAST_SCREENSHOTS")


def _unavailable() -> str | None:
    """Why the browser tests cannot run here, or None."""
    path = shutil.which(CHROMIUM) or (CHROMIUM if os.access(CHROMIUM, os.X_OK) else None)
    if path is None:
        return f"no Chromium at {CHROMIUM} (install Debian's chromium, or set DUECAST_CHROMIUM)"
    try:
        import playwright.sync_api  # noqa: F401, PLC0415 - only this tier needs it
    except ImportError:
        return "the playwright package is not installed (pip install -e '.[test]')"
    return None


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    why = _unavailable()
    if why is not None:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"browser tests must run in CI, but: {why}", pytrace=False)
        pytest.skip(why)
    from playwright.sync_api import sync_playwright  # noqa: PLC0415

    with sync_playwright() as pw:
        chromium = pw.chromium.launch(executable_path=CHROMIUM, headless=True)
        yield chromium
        chromium.close()


@dataclass
class LiveSystem:
    """A dispatcher, a worker and `duecast web`, running in this process on a fresh table and queue."""

    settings: Settings
    url: str
    enqueuer: Enqueuer
    sql: pymysql.cursors.Cursor
    history: History

    def job_state(self, job_id: int) -> int | None:
        self.sql.execute(f"SELECT dc_state FROM `{self.settings.jobs.table}` WHERE id = %s", (job_id,))
        row = self.sql.fetchone()
        return None if row is None else int(row[0])


@contextmanager
def _thread(target: Callable[[threading.Event], object]) -> Iterator[None]:
    stop = threading.Event()
    thread = threading.Thread(target=target, args=(stop,), daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(20)


@pytest.fixture
def live(
    mysql_settings: MySQLSettings, redis_settings: RedisSettings, sql: pymysql.cursors.Cursor
) -> Iterator[LiveSystem]:
    table = f"users_{uuid.uuid4().hex[:8]}"
    jobs = f"jobs_{uuid.uuid4().hex[:8]}"
    create_table(sql, table, "rescan", 3000)
    settings = Settings(
        mysql=mysql_settings,
        redis=redis_settings,
        sources=[  # type: ignore[list-item]
            {
                "name": app.SOURCE,
                "table": table,
                "id_column": "user_id",
                "due_column": "updated_time",
                "period_s": 2,
                "claim_batch": 250,
            }
        ],
        jobs={  # type: ignore[arg-type]
            "table": jobs,
            "schedules_table": f"{jobs}_s",
            "queues": ["default", "mail"],
            "schedules": [{"name": "nightly-report", "task": "flaky", "cron": "0 3 * * *"}],
        },
        worker={"app": "tests.browser.app", "block_timeout_s": 0.1, "pop_batch": 250},  # type: ignore[arg-type]
        dispatcher={"poll_interval_s": 0.05},  # type: ignore[arg-type]
        web={"token": TOKEN, "port": 0, "sample_interval_s": 0.3, "refresh_s": 1},  # type: ignore[arg-type]
    )
    migrate.apply(settings)
    app.FLAKY.reset()
    sampler = Sampler.connect(settings)
    history = History(settings.web.history_points)
    redis_client = connect_redis(settings.redis)
    enqueuer = Enqueuer(settings, redis_client, app.handlers.task_names)
    ctx = WebContext(settings, history, settings.jobs.schedules, wake=enqueuer.wake)
    with ExitStack() as stack:
        stack.enter_context(_thread(lambda stop: serve_dispatcher(settings, stop)))
        stack.enter_context(_thread(lambda stop: serve_worker(settings, stop)))
        port = stack.enter_context(serve_web(ctx, sampler))
        yield LiveSystem(settings, f"http://127.0.0.1:{port}", enqueuer, sql, history)
    redis_client.close()
    sql.execute(f"DROP TABLE IF EXISTS `{table}`, `{jobs}`, `{jobs}_s`")


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    tab = context.new_page()
    tab.set_default_timeout(15_000)
    yield tab
    context.close()


def screenshot(page: Any, name: str) -> None:
    """Save the page to $DUECAST_SCREENSHOTS/<name>.png when that is set (docs/img)."""
    if SHOTS:
        page.screenshot(path=str(Path(SHOTS) / f"{name}.png"), full_page=True)
