"""The dashboard shows fleet-wide limits (cli/web/limits_view.py): a source's page its rate, burst,
tokens and max_running; the overview a line per source whose demand exceeds its rate, with the
period the limit allows, as the dispatcher recorded it in duecast_limits."""

from __future__ import annotations

from collections.abc import Iterator

import pymysql
import pytest

from duecast.cli.web.app import create_app
from duecast.cli.web.context import WebContext
from duecast.shared.settings import DispatcherSettings
from tests.integration.ops.web_helpers import Web

pytestmark = pytest.mark.integration
LIMITS = DispatcherSettings().limits_table


@pytest.fixture
def limits_cleared(sql: pymysql.cursors.Cursor) -> Iterator[None]:
    yield
    sql.execute(f"DELETE FROM `{LIMITS}` WHERE name = 'users'")


@pytest.mark.usefixtures("limits_cleared")
def test_the_dashboard_says_a_limit_and_the_period_it_allows(web: Web, sql: pymysql.cursors.Cursor) -> None:
    src = web.settings.sources[0].model_copy(update={"rate_limit_per_s": 1.0, "max_running": 20})
    settings = web.settings.model_copy(update={"sources": [src]})
    ctx = WebContext(settings, web.ctx.history, settings.jobs.schedules, wake=lambda: None)
    client = create_app(ctx).test_client()
    web.read()

    page = client.get("/sources/users").get_data(as_text=True)
    assert 'id="limits"' in page
    assert "rate_limit_per_s 1.0 (burst 2" in page
    assert "max_running 20" in page
    assert "over-limit" not in client.get("/").get_data(as_text=True)

    sql.execute(
        f"INSERT INTO `{LIMITS}` (name, tokens, refilled_at, reserved, reserved_until, allowed_period_s) "
        "VALUES ('users', 0, NOW(6), 0, NOW(6), 50)"
    )
    overview = client.get("/").get_data(as_text=True)
    assert "asks more than its rate_limit_per_s (1.0/s): the limit allows a period of 50.0 s" in overview
    assert "the limit allows a period of 50.0 s" in client.get("/sources/users").get_data(as_text=True)
