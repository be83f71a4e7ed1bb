"""The dashboard's numbers in three states, in headless Chromium against live processes: a range-mode
source before its first pass ends (never `100%`, no lag axis of `never`), a source whose downstream
refuses every call (failures drawn red, beside finished in blue) and a healthy one (100%).

With DUECAST_SCREENSHOTS=docs/img (scripts/dashboard-shots) it saves the pictures docs/observability.md
shows: web-first-pass.png, web-failing.png, web-healthy.png and web-states.png (the overview).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import uuid
from collections.abc import Iterator
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
from duecast.shared.settings import MySQLSettings, RedisSettings, Settings
from duecast.shared.storage.admin import migrate
from tests.browser.conftest import _thread, screenshot
from tests.browser.states_app import FAILING, FIRST_PASS, HEALTHY
from tests.integration.conftest import create_table
from tests.integration.polling import wait_until

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parents[2]
RED, BLUE = "rgb(201, 42, 42)", "rgb(31, 95, 191)"


@dataclass
class States:
    url: str
    history: History


def source(name: str, table: str, **fields: Any) -> dict[str, Any]:
    return {"name": name, "table": table, "id_column": "user_id", "due_column": "updated_time", **fields}


@pytest.fixture
def states(
    mysql_settings: MySQLSettings, redis_settings: RedisSettings, sql: pymysql.cursors.Cursor
) -> Iterator[States]:
    """Three sources, each with a worker process of its own: the slow first pass holds up no other
    source, and each worker registers under its own name (host:pid) as serving its source."""
    tables = {name: f"{name}_{uuid.uuid4().hex[:8]}" for name in (FIRST_PASS, FAILING, HEALTHY)}
    create_table(sql, tables[FIRST_PASS], "rescan", 6000)
    create_table(sql, tables[FAILING], "rescan", 3000)
    create_table(sql, tables[HEALTHY], "rescan", 3000)
    settings = Settings(
        mysql=mysql_settings,
        redis=redis_settings,
        sources=[  # type: ignore[list-item]
            source(FIRST_PASS, tables[FIRST_PASS], period_s=600, mode="ranges", range_size=100),
            source(FAILING, tables[FAILING], period_s=2, claim_batch=250),
            source(HEALTHY, tables[HEALTHY], period_s=2, claim_batch=250),
        ],
        jobs={"enabled": False},  # type: ignore[arg-type]
        worker={"app": "tests.browser.states_app"},  # type: ignore[arg-type]
        dispatcher={"poll_interval_s": 0.05},  # type: ignore[arg-type]
        web={"port": 0, "sample_interval_s": 0.3, "refresh_s": 1},  # type: ignore[arg-type]
    )
    migrate.apply(settings)
    history = History(settings.web.history_points)
    ctx = WebContext(settings, history, [])
    with ExitStack() as stack:
        stack.enter_context(_thread(lambda stop: serve_dispatcher(settings, stop)))
        for name in tables:
            stack.enter_context(worker_process(settings, name))
        port = stack.enter_context(serve_web(ctx, Sampler.connect(settings)))
        yield States(f"http://127.0.0.1:{port}", history)
    names = ", ".join(f"`{t}`" for t in tables.values())
    sql.execute(f"DROP TABLE IF EXISTS {names}, `dc_ranges_{FIRST_PASS}`")


@contextmanager
def worker_process(settings: Settings, name: str) -> Iterator[None]:
    """`duecast worker` for source `name` alone, in a process of its own, stopped with SIGTERM."""
    env = {
        **os.environ,
        "DUECAST_MYSQL__DATABASE": settings.mysql.database,
        "DUECAST_REDIS__KEY_PREFIX": settings.redis.key_prefix,
        "DUECAST_SOURCES": json.dumps([s.model_dump() for s in settings.sources]),
        "DUECAST_JOBS__ENABLED": "false",
        "DUECAST_WORKER__SOURCES": json.dumps([name]),
        "DUECAST_WORKER__BLOCK_TIMEOUT_S": "0.1",
        "DUECAST_WORKER__POP_BATCH": "250",
    }
    args = [sys.executable, "-m", "duecast", "worker", "--app", settings.worker.app or ""]
    proc = subprocess.Popen(args, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        yield
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def cell(page: Any, name: str, column: int) -> str:
    found = page.locator(f'#sources tr[data-source="{name}"] td:nth-child({column})')
    text: str = found.inner_text() if found.count() else ""
    return text.strip()


FRESH, FAILING_SHARE, FAILED_PER_S = 7, 8, 11  # columns of the sources table


def first_pass_share(page: Any) -> int | None:
    match = re.fullmatch(r"first pass (\d+)%", cell(page, FIRST_PASS, FRESH))
    return None if match is None else int(match.group(1))


def axis_labels(page: Any, chart: str) -> list[str]:
    labels: list[str] = page.locator(f"#{chart} svg text.axis").all_inner_texts()
    return labels


def test_three_states_read_as_they_are(page: Any, states: States) -> None:
    page.goto(states.url + "/")
    # The healthy source has checked its users once (all due at the start): fresh.
    page.wait_for_function(
        f"() => document.querySelector('#sources tr[data-source=\"{HEALTHY}\"] td:nth-child({FRESH})')"
        "?.textContent.trim() === '100.0%'",
        timeout=30_000,
    )
    # The first pass is under way (some ranges checked) and says so instead of a share of 100%.
    wait_until(lambda: (first_pass_share(page) or 0) >= 20, "the first pass to pass 20%", timeout_s=30)
    wait_until(lambda: len(states.history) >= 25, "some readings for the charts", timeout_s=30)
    page.reload()
    share = first_pass_share(page)
    assert share is not None
    assert 0 < share < 100
    assert cell(page, FIRST_PASS, 9) == "never"  # the users not reached yet were never checked
    assert "InnoDB" not in page.locator("main").inner_text()  # every share here is exact
    failed = page.locator(f'#sources tr[data-source="{FAILING}"] td:nth-child({FAILED_PER_S})')

    def failures_drawn_bad() -> bool:
        # failed/s is a rate over the last readings: between two passes of a 2 s period it can
        # read 0 (not bad) for a moment, so wait for a reading that caught failures.
        page.reload()
        return "bad" in (failed.get_attribute("class") or "")

    wait_until(failures_drawn_bad, "the failing source's failed/s drawn as bad", timeout_s=20)
    # Its failed checks count as checks in `fresh`: beside it, the share that failed says why.
    assert cell(page, FAILING, FAILING_SHARE) in ("100.0%", "-")  # "-": no check between two readings
    assert cell(page, HEALTHY, FAILING_SHARE) in ("0.0%", "-")
    screenshot(page, "web-states")

    page.goto(f"{states.url}/sources/{FIRST_PASS}")
    assert page.locator("#sources td:nth-child(7)").inner_text().startswith("first pass ")
    assert "never" not in axis_labels(page, "chart-lag")
    assert "ranges claimed per second" in (page.get_attribute("#chart-claimed svg", "aria-label") or "")
    assert "rows per second" in (page.get_attribute("#chart-throughput svg", "aria-label") or "")
    screenshot(page, "web-first-pass")

    page.goto(f"{states.url}/sources/{FAILING}")
    stroke = "e => getComputedStyle(e).stroke"
    assert page.eval_on_selector("#chart-throughput polyline.t-failed", stroke) == RED
    assert (
        page.eval_on_selector("#chart-throughput rect.key.t-failed", "e => getComputedStyle(e).fill") == RED
    )
    screenshot(page, "web-failing")

    page.goto(f"{states.url}/sources/{HEALTHY}")
    assert page.eval_on_selector("#chart-throughput polyline.t-done", stroke) == BLUE
    # Fresh again within a refresh or two (a loaded machine can let a 2 s period slip for a moment).
    page.wait_for_function(
        "() => document.querySelector('#sources td:nth-child(7)')?.textContent.trim() === '100.0%'",
        timeout=20_000,
    )
    assert "never" not in axis_labels(page, "chart-lag")
    screenshot(page, "web-healthy")
