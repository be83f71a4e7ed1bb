"""`duecast web` against real MariaDB and Redis, through Flask's test client and once over HTTP: pages
render what the system holds, charts get data, and retry/discard need the token and a confirmation.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest

from duecast.shared.states import State
from tests.integration.ops.web_helpers import TOKEN, Web, points

pytestmark = pytest.mark.integration


def dead_job(web: Web, payload: str = "x") -> int:
    job_id = web.enqueuer.enqueue("fail_always", payload, max_attempts=1)
    web.run_jobs()
    assert web.state(job_id) == State.DEAD
    return job_id


def test_the_overview_waits_for_readings_then_charts_throughput_and_lag(web: Web) -> None:
    html = web.page("/")
    assert "Taking the first reading" in html
    assert points(html, "chart-throughput") == 0

    web.read()
    web.sampler.queue.add_stats("users", {"acked": 500})
    web.read(2)
    html = web.page("/")

    assert 'data-source="users"' in html
    assert 'data-source="jobs.default"' in html
    assert 'data-source="jobs.mail"' in html
    assert points(html, "chart-throughput") >= 2  # two intervals, per source
    assert points(html, "chart-lag") >= 3
    assert "re-scan every 10 s (rows)" in html
    assert "0.0%" in html  # nothing checked within period + 1 s: every user was checked an hour ago
    # No worker runs here: each source and queue says so.
    for label in ("source users", "queue default (jobs.default)", "queue mail (jobs.mail)"):
        assert f'<p class="flash bad unserved">{label}: no live worker serves it;' in html


def test_a_source_page_and_a_queue_page(web: Web) -> None:
    web.read(2)
    html = web.page("/sources/users")
    assert points(html, "chart-freshness") == 2
    assert points(html, "chart-backlog") == 4  # due and in flight, two readings each
    assert ">50<" in html  # 50 rows due

    html = web.page("/sources/jobs.mail")
    assert "Queue mail" in html
    assert "chart-freshness" not in html
    assert "no source or queue named" in web.page("/sources/nope", 404)


def test_dead_jobs_show_their_error_and_a_job_its_traceback(web: Web) -> None:
    job_id = dead_job(web, "boom-payload")

    html = web.page("/dead")
    assert f'data-job="{job_id}"' in html
    assert "RuntimeError: boom boom-payload" in html
    assert web.page("/dead?queue=mail").count("data-job=") == 0
    assert f'data-job="{job_id}"' in web.page("/dead?task=fail_always")

    html = web.page(f"/jobs/{job_id}")
    assert "Traceback (most recent call last)" in html
    assert 'id="retry"' in html
    assert "boom-payload" in html
    assert "no job 999999999" in web.page("/jobs/999999999", 404)


def test_retrying_a_dead_job_needs_the_token_and_a_confirmation(web: Web) -> None:
    job_id = dead_job(web)
    assert "Yes, retry job" in web.page(f"/jobs/{job_id}/retry")

    assert web.client.post(f"/jobs/{job_id}/retry", data={"confirm": "yes"}).status_code == 403
    wrong = web.client.post(f"/jobs/{job_id}/retry", data={"confirm": "yes", "token": TOKEN + "x"})
    assert wrong.status_code == 403
    assert "not the token" in wrong.get_data(as_text=True)
    assert web.client.post(f"/jobs/{job_id}/retry", data={"token": TOKEN}).status_code == 400
    assert web.state(job_id) == State.DEAD
    assert web.woken == []

    done = web.client.post(f"/jobs/{job_id}/retry", data={"confirm": "yes", "token": TOKEN})
    assert (done.status_code, done.headers["Location"]) == (303, f"/jobs/{job_id}?done=retried")
    assert web.state(job_id) == State.IDLE
    assert web.woken == [1]
    assert "Retried" in web.page(f"/jobs/{job_id}?done=retried")
    # Pending now, so neither action applies any more.
    assert "applies to dead jobs only" in web.page(f"/jobs/{job_id}/retry", 409)
    # If a worker ran it before the redirect arrived, the page says so instead of "not found".
    web.sql.execute(f"DELETE FROM `{web.jobs_table}` WHERE id = %s", (job_id,))
    assert "has already run and finished" in web.page(f"/jobs/{job_id}?done=retried")
    assert "no job" in web.page(f"/jobs/{job_id}", 404)


def test_discarding_a_dead_job_deletes_it(web: Web) -> None:
    job_id = dead_job(web)
    done = web.client.post(f"/jobs/{job_id}/discard", data={"confirm": "yes", "token": TOKEN})
    assert (done.status_code, done.headers["Location"]) == (303, f"/dead?discarded={job_id}")
    assert web.state(job_id) is None


def test_without_a_token_the_dashboard_changes_nothing(make_web: Callable[..., Web]) -> None:
    web = make_web(token=None)
    job_id = dead_job(web)
    assert 'id="retry"' not in web.page(f"/jobs/{job_id}")
    assert "set web.token" in web.page(f"/jobs/{job_id}/retry", 403)
    assert web.client.post(f"/jobs/{job_id}/retry", data={"confirm": "yes", "token": ""}).status_code == 403
    assert web.state(job_id) == State.DEAD


XSS = "<script>alert(1)</script><img src=x onerror=alert(2)>\"'><svg/onload=alert(3)>"


def test_hostile_payloads_and_paths_are_escaped_or_refused(web: Web) -> None:
    """What the probe of issue 17 tried on the dashboard: markup in a job's payload and error, a
    hostile queue/task filter, path traversal, and a forged action without the token."""
    job_id = dead_job(web, XSS)  # fail_always puts its payload into the error, so into last_error too
    for path in (f"/jobs/{job_id}", "/dead", f"/dead?task={XSS}&queue={XSS}", f"/jobs/{job_id}/retry"):
        html = web.page(path, 200)
        assert "<script>alert" not in html, path
        assert "<img src=x" not in html, path
        assert "<svg/onload" not in html, path
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in web.page(f"/jobs/{job_id}")
    for path in ("/static/../app.py", "/static/..%2fapp.py", "/static/%2e%2e/%2e%2e/pyproject.toml"):
        assert web.client.get(path).status_code == 404, path
    assert web.client.get("/jobs/1%20OR%201=1").status_code == 404
    forged = web.client.post(f"/jobs/{job_id}/discard", data={"confirm": "yes"})  # a cross-site form
    assert forged.status_code == 403
    assert web.state(job_id) == State.DEAD


def test_workers_are_seen_through_the_jobs_they_run(web: Web) -> None:
    assert "No worker is running a job now" in web.page("/workers")
    job_id = web.enqueuer.enqueue("record", "r")
    web.sql.execute(  # its run, started by host-a:42 (a run's job row is not written while it runs)
        f"INSERT INTO `{web.settings.jobs.runs_table}` (queue, priority, jobs, members, dc_state, "
        "dc_attempt, worker, started_at, lease_until) VALUES ('default', 0, 1, %s, %s, 1, 'host-a:42', "
        "NOW(6), NOW(6) + INTERVAL 1 MINUTE)",
        (str(job_id), int(State.RUNNING)),
    )
    html = web.page("/workers")
    assert "host-a:42" in html
    assert "live" in html


def test_schedules_show_configured_and_forgotten_ones(web: Web) -> None:
    web.sql.execute(
        f"INSERT INTO `{web.settings.jobs.schedules_table}` (name, last_run_at, runs) "
        "VALUES ('nightly', UTC_TIMESTAMP(6) - INTERVAL 1 DAY, 4), ('gone', '2024-01-01', 9)"
    )
    html = web.page("/schedules")
    nightly = re.search(r'data-schedule="nightly">(.*?)</tr>', html, re.S)
    assert nightly is not None
    assert "cron 0 3 * * * (UTC)" in nightly.group(1)
    assert re.search(r"\d{4}-\d\d-\d\d 03:00:00 UTC", nightly.group(1))  # the next 03:00
    gone = re.search(r'data-schedule="gone">(.*?)</tr>', html, re.S)
    assert gone is not None
    assert ">9<" in gone.group(1)


def test_every_response_carries_a_strict_content_security_policy(web: Web) -> None:
    resp = web.client.get("/")
    assert "script-src 'self'" in resp.headers["Content-Security-Policy"]
    assert "frame-ancestors 'none'" in resp.headers["Content-Security-Policy"]
    assert resp.headers["X-Content-Type-Options"] == "nosniff"
    assert web.client.get("/static/live.js").status_code == 200


def test_a_done_jobs_page_shows_its_result_escaped(web: Web) -> None:
    job_id = web.enqueuer.enqueue("record", "r")
    # What a worker writes for a task that returned a value (kept: jobs.retention_s > 0).
    web.sql.execute(
        f"UPDATE `{web.jobs_table}` SET dc_state = %s, result = %s, finished_at = NOW(6) WHERE id = %s",
        (int(State.DONE), '{"answer":42,"html":"<b>"}', job_id),
    )
    html = web.page(f"/jobs/{job_id}")
    assert '<pre id="result">{&#34;answer&#34;:42,&#34;html&#34;:&#34;&lt;b&gt;&#34;}</pre>' in html
    plain = web.enqueuer.enqueue("record", "no result")
    assert 'id="result"' not in web.page(f"/jobs/{plain}")


def test_cancelling_a_pending_job_needs_the_token_and_a_confirmation(web: Web) -> None:
    job_id = web.enqueuer.enqueue("record", "later", delay_s=3600)
    assert 'id="cancel"' in web.page(f"/jobs/{job_id}")
    assert "Yes, cancel job" in web.page(f"/jobs/{job_id}/cancel")
    wrong = web.client.post(f"/jobs/{job_id}/cancel", data={"confirm": "yes", "token": TOKEN + "x"})
    assert wrong.status_code == 403
    assert web.state(job_id) == State.IDLE

    done = web.client.post(f"/jobs/{job_id}/cancel", data={"confirm": "yes", "token": TOKEN})
    assert (done.status_code, done.headers["Location"]) == (303, f"/jobs/{job_id}?done=cancelled")
    assert web.state(job_id) == State.CANCELLED
    html = web.page(f"/jobs/{job_id}?done=cancelled")
    assert "Cancelled:" in html
    assert 'class="state cancelled"' in html
    assert 'id="cancel"' not in html
    assert "applies to pending or running jobs only" in web.page(f"/jobs/{job_id}/cancel", 409)
