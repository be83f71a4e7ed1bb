"""Fairness on real MariaDB + Redis (issue 27.8): one worker serving a re-scan source and a job queue
whose backlog is thousands of slow (2 s) tasks keeps the source checked within its period + 1 s,
while the jobs still run. Real loops, real seconds (a few periods): what is measured is when the
handler checked each user, so the assertion reads no clock of its own.

Before the fair share (shared.inflight.fair_rooms, worker/lanes.py), plain checks beside plain jobs
were 0% fresh, rows and spans alike (the jobs filled the cap, and their rows held every thread), and
async checks beside async jobs 62% at worst (the jobs refilled the cap as it freed); async checks
beside plain jobs passed before too (a guard)."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pymysql
import pytest

from duecast.dispatcher.main import serve as serve_dispatcher
from duecast.shared.api.enqueue import Enqueuer, Job
from duecast.shared.fanout.client import connect_redis
from duecast.shared.queries.ranges import ranges_table
from duecast.shared.settings import MySQLSettings, RedisSettings, Settings, SourceSettings
from duecast.shared.storage.admin import migrate
from duecast.worker import main as worker_main
from duecast.worker.main import serve as serve_worker
from tests.integration import fairness_app
from tests.integration.fairness_app import LOG, SOURCE

pytestmark = pytest.mark.integration

USERS, PERIOD_S, SLACK_S = 2_000, 4, 1.0
# Slow jobs queued before the roles start: more than the run can drain (async ones run 10,000 at once)
BACKLOG = {"slow_async": 15_000, "slow_plain": 5_000}
MIN_JOBS = {"slow_async": 2_000, "slow_plain": 8}
WARM_S = 2 * PERIOD_S  # the first pass (every user due at once) and its settling are not judged
JUDGED_S = 3 * PERIOD_S


@pytest.fixture
def fair(
    mysql_settings: MySQLSettings, redis_settings: RedisSettings, sql: pymysql.cursors.Cursor
) -> Iterator[Callable[..., Settings]]:
    """fair(handler=..., **worker) -> settings for USERS users (all due, period PERIOD_S) served by
    `handler` (spans of 100 users for the batch handler) and a jobs queue, on one worker, migrated."""
    tables: list[str] = []

    def make(handler: str = SOURCE, **worker: Any) -> Settings:
        table = f"fair_{uuid.uuid4().hex[:8]}"
        tables.extend([table, *(f"{table}_jobs{end}" for end in ("", "_s", "_runs", "_cursors"))])
        sql.execute(
            f"CREATE TABLE `{table}` (user_id BIGINT PRIMARY KEY, updated_time DATETIME(6) NOT NULL)"
        )
        sql.execute(f"INSERT INTO `{table}` SELECT seq, '2020-01-01' FROM seq_1_to_{USERS}")
        src = SourceSettings(
            name=handler,
            table=table,
            id_column="user_id",
            due_column="updated_time",
            period_s=PERIOD_S,
            on_success="touch",
            # Leases far longer than a run: the worker is in this process, and a renewal stalled by
            # a loaded machine would fence it (os._exit) and end pytest with it (exit 69, twice in
            # clean-clone runs). What is judged is the pace, which no lease takes part in.
            lease_s=45.0,
            **({"mode": "ranges", "range_size": 100} if handler.endswith("_spans") else {}),
        )
        settings = Settings(
            mysql=mysql_settings,
            redis=redis_settings,
            sources=[src],
            jobs={"table": f"{table}_jobs", "schedules_table": f"{table}_jobs_s", "lease_s": 45.0},  # type: ignore[arg-type]
            worker={  # type: ignore[arg-type]
                "app": "tests.integration.fairness_app",
                "sources": [handler, "jobs"],
                **worker,
            },
            dispatcher={"poll_interval_s": 0.05},  # type: ignore[arg-type]
        )
        migrate.apply(settings)
        if src.mode == "ranges":
            tables.append(ranges_table(src))
        LOG.reset()
        return settings

    yield make
    for table in tables:
        sql.execute(f"DROP TABLE IF EXISTS `{table}`")


def backlog(settings: Settings, task: str) -> None:
    enqueuer = Enqueuer(settings, connect_redis(settings.redis), fairness_app.handlers.task_names)
    enqueuer.enqueue_many(Job(task, i) for i in range(BACKLOG[task]))


def run_for(settings: Settings, seconds: float) -> float:
    """Dispatcher and worker in threads for `seconds`; returns when they started (monotonic)."""
    stop = threading.Event()
    roles = [threading.Thread(target=f, args=(settings, stop)) for f in (serve_dispatcher, serve_worker)]
    start = time.monotonic()
    for role in roles:
        role.start()
    try:
        while time.monotonic() < start + seconds:
            time.sleep(0.05)
    finally:
        stop.set()
        for role in roles:
            role.join(timeout=60)
    return start


def fresh_shares(checks: dict[int, list[float]], moments: list[float]) -> list[float]:
    """At each moment, the share of users checked within PERIOD_S + SLACK_S before it."""
    window = PERIOD_S + SLACK_S
    shares = []
    for t in moments:
        fresh = sum(1 for times in checks.values() if any(t - window <= c <= t for c in times))
        shares.append(fresh / USERS)
    return shares


CASES = {
    # handler of the re-scan, task of the backlog, worker settings
    # 1,000 in flight: 500 jobs/s, so the backlog outlasts the run
    "async-check-async-jobs": (SOURCE, "slow_async", {"max_in_flight": 1000}),
    "async-check-plain-jobs": (SOURCE, "slow_plain", {"concurrency": 4}),
    "plain-check-plain-jobs": (f"{SOURCE}_plain", "slow_plain", {"concurrency": 4}),
    # the shape: a plain batch handler over spans of 100 users (range mode)
    "plain-spans-plain-jobs": (f"{SOURCE}_spans", "slow_plain", {"concurrency": 4}),
}


# In scripts/dev test's serial phase: real seconds against a 1 s slack, with the worker in this
# process; beside the parallel phase's other processes on 2 cores, its lease watchdog fenced it
# (os._exit), taking the pytest-xdist worker down with it.
@pytest.mark.serial
@pytest.mark.parametrize("case", list(CASES))
def test_a_slow_job_backlog_does_not_starve_a_rescan_on_the_same_worker(
    fair: Callable[..., Settings], case: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Stopping, the worker waits this long for what is in flight: thousands of slow jobs never end.
    monkeypatch.setattr(worker_main, "FINISH_GRACE_S", 1.0)
    handler, task, worker = CASES[case]
    settings = fair(handler, **worker)
    backlog(settings, task)
    start = run_for(settings, WARM_S + JUDGED_S)
    with LOG.lock:
        checks = {u: list(ts) for u, ts in LOG.checks.items()}
        ran = LOG.tasks[task]
    moments = [start + WARM_S + 0.5 * k for k in range(int(2 * JUDGED_S) + 1)]
    shares = fresh_shares(checks, moments)
    assert min(shares) >= 0.99, [round(s, 3) for s in shares]
    # The jobs go on beside it: at least one thread's worth of plain ones (a run's worth of 2 s
    # tasks), a quarter of the cap's worth of async ones.
    assert ran >= MIN_JOBS[task], ran
