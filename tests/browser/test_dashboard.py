"""The dashboard in headless Chromium against a live dispatcher, worker and `duecast web`: every page
renders, the charts fill with data as the page refreshes itself, and a dead job is retried from the
browser (confirmation and token included) and then runs.
"""

from __future__ import annotations

import io
import re
import time
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from duecast.cli.history import History
from duecast.cli.sampler import Sampler
from duecast.cli.status_view import render
from duecast.shared.states import State
from duecast.shared.storage.admin.dashboard_store import DashboardStore
from duecast.shared.storage.db import Database
from tests.browser import app
from tests.browser.conftest import SHOTS, TOKEN, LiveSystem, screenshot
from tests.integration.polling import wait_until

pytestmark = pytest.mark.browser


def save_status(live: LiveSystem, path: Path) -> None:
    """`duecast status` as the terminal shows it, saved as SVG (rich's export)."""
    sampler = Sampler.connect(live.settings)
    history = History(2)
    history.add(sampler.read())
    time.sleep(1.0)  # a rate needs two readings some time apart (a picture, not an assertion)
    history.add(sampler.read())
    workers = DashboardStore(Database(live.settings.mysql), live.settings.jobs).workers()
    console = Console(record=True, width=150, file=io.StringIO())
    latest = history.latest()
    assert latest is not None
    console.print(render(latest, history, workers))
    console.save_svg(str(path), title="duecast status")


def chart_points(page: Any, chart_id: str) -> int:
    return int(page.get_attribute(f"#{chart_id} svg.chart", "data-points") or 0)


def test_the_overview_renders_and_its_charts_fill_as_it_refreshes(page: Any, live: LiveSystem) -> None:
    page.goto(live.url + "/")
    assert page.title() == "Overview · duecast"
    assert page.locator("h1").inner_text() == "Overview"
    # The page swaps in fresh numbers and charts every second (static/live.js), with no reload.
    page.wait_for_function(
        "() => Number(document.querySelector('#chart-throughput svg').dataset.points) >= 4"
        " && Number(document.querySelector('#chart-lag svg').dataset.points) >= 4",
        timeout=20_000,
    )
    assert page.get_attribute("#live", "data-updated") is not None
    for chart in ("chart-throughput", "chart-lag"):
        assert page.locator(f"#{chart} polyline").count() >= 1
        first = page.locator(f"#{chart} polyline").first.get_attribute("points") or ""
        assert len(first.split()) >= 2, f"{chart} draws a line"
    users = page.locator('#sources tr[data-source="users"]')
    assert users.locator("td").first.inner_text() == "users"
    assert page.locator('#queues tr[data-source="jobs.mail"]').count() == 1
    # The worker checked the 3,000 users, so the source is fresh again.
    page.wait_for_function(
        "() => document.querySelector('#sources tr[data-source=\"users\"] td:nth-child(7)')"
        ".textContent.trim() === '100.0%'",
        timeout=20_000,
    )
    if SHOTS:  # for the docs: a minute of history, and `duecast status` beside it
        wait_until(lambda: len(live.history) >= 150, "a minute of readings", timeout_s=90)
        page.reload()
        screenshot(page, "web-overview")
        save_status(live, Path(SHOTS) / "status.svg")


def test_a_source_page_shows_its_four_charts(page: Any, live: LiveSystem) -> None:
    wait_until(lambda: len(live.history) >= 3, "three readings")
    page.goto(live.url + "/")
    page.click('#sources a[href="/sources/users"]')
    assert page.locator("h1").inner_text().startswith("Source users")
    for chart in ("chart-throughput", "chart-lag", "chart-backlog", "chart-freshness"):
        assert chart_points(page, chart) >= 2, chart
    assert page.locator("#counters th", has_text="acked").count() == 1
    screenshot(page, "web-source")


def test_workers_and_schedules_render(page: Any, live: LiveSystem) -> None:
    page.goto(live.url + "/workers")
    assert page.locator("h1").inner_text() == "Workers"
    assert page.locator("#workers").is_visible()
    page.click("nav >> text=Schedules")
    row = page.locator('#schedules tr[data-schedule="nightly-report"]')
    assert "cron 0 3 * * * (UTC)" in row.inner_text()
    assert re.search(r"\d{4}-\d\d-\d\d 03:00:00 UTC", row.inner_text())
    screenshot(page, "web-schedules")


def test_a_dead_job_is_retried_from_the_browser_and_then_runs(page: Any, live: LiveSystem) -> None:
    job_id = live.enqueuer.enqueue("flaky", {"email": "ada@example.com"}, queue="mail", max_attempts=1)
    wait_until(lambda: live.job_state(job_id) == State.DEAD, "the job to die after its one attempt")

    page.goto(live.url + "/")
    page.click("nav >> text=Dead jobs")
    row = page.locator(f'#dead-jobs tr[data-job="{job_id}"]')
    assert "ConnectionError: the mail server refused ada@example.com" in row.inner_text()
    screenshot(page, "web-dead-jobs")
    row.locator("a").first.click()
    assert "Traceback (most recent call last)" in page.locator("#last-error").inner_text()
    screenshot(page, "web-job")

    page.click("#retry")
    assert page.locator("h1").inner_text() == f"Retry job {job_id}?"
    page.fill("input[name=token]", "not-the-token-at-all")
    page.click("#confirm")
    assert "not the token" in page.locator("#error").inner_text()
    assert live.job_state(job_id) == State.DEAD

    with app.FLAKY.lock:
        app.FLAKY.broken = False  # the mail server is back
    page.fill("input[name=token]", TOKEN)
    screenshot(page, "web-confirm")
    page.click("#confirm")
    assert "Retried" in page.locator(".flash").inner_text()  # the job may even have run already

    wait_until(lambda: live.job_state(job_id) is None, "the retried job to run and finish")
    assert app.FLAKY.runs == [{"email": "ada@example.com"}] * 2
    page.goto(f"{live.url}/jobs/{job_id}")
    assert "finished and was deleted" in page.locator("#error").inner_text()
