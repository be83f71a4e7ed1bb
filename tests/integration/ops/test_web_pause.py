"""The dashboard's pause and resume buttons (cli/web/pause_actions.py) against real MariaDB: a
confirmation page, then a POST that needs web.token and the confirmation flag, as retry does."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pymysql
import pytest

from duecast.shared.api import pauses
from duecast.shared.queries.pauses import PAUSES_TABLE
from tests.integration.ops.web_helpers import TOKEN, Web

pytestmark = pytest.mark.integration


@pytest.fixture
def paused_cleared(sql: pymysql.cursors.Cursor) -> Iterator[None]:
    """Pauses are one table for the whole test database: none of this test's outlives it."""
    yield
    sql.execute(f"DELETE FROM `{PAUSES_TABLE}` WHERE `source` IN ('users', 'jobs.mail')")
    sql.execute(f"DELETE FROM `{PAUSES_TABLE}` WHERE `kind` = 'task' AND `name` IN ('record', 'nope')")


def paused_sources(web: Web) -> list[str]:
    return [p.source for p in pauses.paused(web.settings)]


@pytest.mark.usefixtures("paused_cleared")
def test_pausing_and_resuming_from_a_source_page_needs_the_token_and_a_confirmation(web: Web) -> None:
    web.read()
    assert 'id="pause"' in web.page("/sources/users")
    assert "Yes, pause source users" in web.page("/sources/users/pause")

    wrong = web.client.post("/sources/users/pause", data={"confirm": "yes", "token": TOKEN + "x"})
    assert wrong.status_code == 403
    assert "not the token" in wrong.get_data(as_text=True)
    assert web.client.post("/sources/users/pause", data={"token": TOKEN}).status_code == 400
    assert paused_sources(web) == []

    done = web.client.post("/sources/users/pause", data={"confirm": "yes", "token": TOKEN})
    assert (done.status_code, done.headers["Location"]) == (303, "/sources/users?done=paused")
    assert paused_sources(web) == ["users"]
    assert '<a href="/sources/users">source users</a> is paused' in web.page("/")
    html = web.page("/sources/users")
    assert 'id="paused"' in html
    assert 'id="resume"' in html

    done = web.client.post("/sources/users/resume", data={"confirm": "yes", "token": TOKEN})
    assert done.status_code == 303
    assert paused_sources(web) == []
    assert 'id="paused"' not in web.page("/sources/users")
    assert "is paused" not in web.page("/")


@pytest.mark.usefixtures("paused_cleared")
def test_a_queue_pauses_as_a_queue(web: Web) -> None:
    web.client.post("/sources/jobs.mail/pause", data={"confirm": "yes", "token": TOKEN})
    listed = [(p.kind, p.name, p.source) for p in pauses.paused(web.settings)]
    assert listed == [("queue", "mail", "jobs.mail")]


@pytest.mark.usefixtures("paused_cleared")
def test_a_task_pauses_from_a_jobs_page_and_resumes_from_the_overview(web: Web) -> None:
    job_id = web.enqueuer.enqueue("record", "r")
    assert 'href="/tasks/record/pause"' in web.page(f"/jobs/{job_id}")
    assert "Yes, pause task record" in web.page("/tasks/record/pause")
    wrong = web.client.post("/tasks/record/pause", data={"confirm": "yes", "token": TOKEN + "x"})
    assert wrong.status_code == 403
    assert web.client.post("/tasks/record/pause", data={"token": TOKEN}).status_code == 400
    assert pauses.paused(web.settings) == []

    done = web.client.post("/tasks/record/pause", data={"confirm": "yes", "token": TOKEN})
    assert (done.status_code, done.headers["Location"]) == (303, "/?done=paused")
    assert [(p.kind, p.name, p.source) for p in pauses.paused(web.settings)] == [("task", "record", "")]
    web.read()
    html = web.page("/")
    assert "task record is paused" in html
    assert 'href="/tasks/record/resume"' in html

    refused = web.client.post("/tasks/nope/pause", data={"confirm": "yes", "token": TOKEN})
    assert refused.status_code == 404
    assert "no task named &#39;nope&#39;" in refused.get_data(as_text=True)

    done = web.client.post("/tasks/record/resume", data={"confirm": "yes", "token": TOKEN})
    assert (done.status_code, done.headers["Location"]) == (303, "/?done=resumed")
    assert pauses.paused(web.settings) == []


def test_unknown_names_and_verbs_are_not_found(web: Web) -> None:
    assert "can be paused" in web.page("/sources/nope/pause", 404)
    web.page("/sources/users/explode", 404)


def test_without_a_token_nothing_can_be_paused(make_web: Callable[..., Web]) -> None:
    web = make_web(token=None)
    web.read()
    assert 'id="pause"' not in web.page("/sources/users")
    assert "set web.token" in web.page("/sources/users/pause", 403)
    assert web.client.post("/sources/users/pause", data={"confirm": "yes", "token": ""}).status_code == 403
    assert "set web.token" in web.page("/tasks/record/pause", 403)
    assert web.client.post("/tasks/record/pause", data={"confirm": "yes", "token": ""}).status_code == 403
    assert paused_sources(web) == []
