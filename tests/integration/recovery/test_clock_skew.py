"""Clock skew: duecast's decisions (due-ness, leases, backoff, schedules) use the database's clock,
so processes whose own clocks are minutes off behave the same. Checked two ways: no role module
reads the wall clock, and a dispatcher and worker whose clock is 10 minutes ahead (or behind) run
due jobs, keep future ones waiting, and back off by the database's clock."""

from __future__ import annotations

import re
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pymysql
import pytest

from duecast.dispatcher.main import serve as serve_dispatcher
from duecast.shared.api.enqueue import Enqueuer
from duecast.shared.settings import MySQLSettings, RedisSettings, Settings
from duecast.shared.states import State
from duecast.shared.storage.admin import migrate
from duecast.worker.main import serve as serve_worker
from tests.integration import jobs_app

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[3]
WALL_CLOCK = re.compile(r"time\.time\(\)|datetime\.now\(|datetime\.utcnow\(|date\.today\(")
DISPLAY_ONLY = {"shared/storage/admin/dashboard_store.py"}  # the web dashboard's own chart timestamps
# Refuses a run_at absurdly far ahead when a job is enqueued, or an Ack.retry(at=...) when a handler
# returns it (shared/acks.py, the same cap: issue 25); whether it is due is NOW(6)'s call, so a
# skewed clock only moves that bound (by its skew), never a job.
INPUT_BOUND_ONLY = {"shared/api/job_input.py", "shared/acks.py"}
# duecast.testing's in-memory clock starts at the test's own now; no role runs it.
TEST_HARNESS = {"shared/testing/jobs.py"}


def test_no_role_reads_the_wall_clock() -> None:
    offenders = [
        f"{path.relative_to(ROOT)}:{n}"
        for package in ("shared", "dispatcher", "worker")
        for path in sorted((ROOT / package).rglob("*.py"))
        if str(path.relative_to(ROOT)) not in DISPLAY_ONLY | INPUT_BOUND_ONLY | TEST_HARNESS
        for n, line in enumerate(path.read_text().splitlines(), start=1)
        if WALL_CLOCK.search(line.split("#", 1)[0])
    ]
    assert offenders == []


@pytest.fixture
def settings(
    mysql_settings: MySQLSettings, redis_settings: RedisSettings, sql: pymysql.cursors.Cursor
) -> Iterator[Settings]:
    table = f"jobs_{uuid.uuid4().hex[:8]}"
    s = Settings(
        mysql=mysql_settings,
        redis=redis_settings,
        jobs={"table": table, "schedules_table": f"{table}_s", "retry_base_s": 60},  # type: ignore[arg-type]
        worker={"app": "tests.integration.jobs_app", "block_timeout_s": 0.1},  # type: ignore[arg-type]
        dispatcher={"poll_interval_s": 0.05},  # type: ignore[arg-type]
    )
    migrate.apply(s)
    jobs_app.RUNS.clear()
    yield s
    sql.execute(f"DROP TABLE IF EXISTS `{table}`, `{table}_s`, `{table}_runs`, `{table}_cursors`")


@pytest.mark.parametrize("skew_s", [600.0, -600.0])
def test_a_skewed_process_runs_due_jobs_and_waits_for_future_ones_by_the_database_clock(
    settings: Settings, sql: pymysql.cursors.Cursor, monkeypatch: pytest.MonkeyPatch, skew_s: float
) -> None:
    real = time.time
    monkeypatch.setattr(time, "time", lambda: real() + skew_s)
    enqueuer = Enqueuer(settings, None)
    now = enqueuer.enqueue("record", "now")
    later = enqueuer.enqueue("record", "in 5 min", delay_s=300)
    failing = enqueuer.enqueue("fail_always", "f")
    serve_dispatcher(settings, threading.Event(), drain=True)
    serve_worker(settings, threading.Event(), drain=True)
    assert sorted(p for p, _ in jobs_app.RUNS) == ["f", "now"]
    t = settings.jobs.table
    sql.execute(f"SELECT id, dc_state, TIMESTAMPDIFF(SECOND, NOW(6), run_at) FROM `{t}` ORDER BY id")
    rows = {int(i): (int(s), int(d)) for i, s, d in sql.fetchall()}
    assert now not in rows
    assert rows[later][0] == State.IDLE
    assert 290 <= rows[later][1] <= 300
    assert rows[failing][0] == State.IDLE
    assert 25 <= rows[failing][1] <= 60
