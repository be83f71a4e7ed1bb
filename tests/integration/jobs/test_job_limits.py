"""A job queue's fleet-wide limits (`[jobs.limits.<queue>]`) at claim time on real MariaDB: a rate
counts jobs, not runs, and max_running the jobs of runs dispatched or started under a live lease."""

from __future__ import annotations

from collections.abc import Iterator

import pymysql
import pytest

from duecast.dispatcher.limits import Limiter
from duecast.shared.api.enqueue import Job
from duecast.shared.process.runtime import build_stores
from duecast.shared.settings import DispatcherSettings
from duecast.shared.settings.limits import Limits
from duecast.shared.storage.leased.jobs import JobStore
from tests.integration.jobs.jobs_env import JobsEnv

pytestmark = pytest.mark.integration
LIMITS = DispatcherSettings().limits_table


@pytest.fixture(autouse=True)
def fresh_buckets(sql: pymysql.cursors.Cursor) -> Iterator[None]:
    yield
    sql.execute(f"DELETE FROM `{LIMITS}`")


def _default_queue(env: JobsEnv, limits: Limits) -> tuple[JobsEnv, JobStore]:
    limited = env.with_jobs(limits={"default": limits}, run_size=4)
    stores = build_stores(limited.settings, limited.settings.all_sources())
    (store,) = [s for s in stores if s.src.name == "jobs.default"]
    assert isinstance(store, JobStore)
    limited.enqueuer.enqueue_many(Job("record", i) for i in range(50))
    return limited, store


def test_a_queue_rate_counts_jobs_not_runs(env: JobsEnv, sql: pymysql.cursors.Cursor) -> None:
    _, store = _default_queue(env, Limits(rate_limit_per_s=1, rate_burst=10))
    limiter = Limiter([store], LIMITS)
    entries = limiter.claim(store, 1000)
    assert store.claimed_rows == 10
    assert len(entries) == 3  # runs of at most 4 jobs
    assert limiter.claim(store, 1000) == [], "the bucket is empty: nothing more this second"
    sql.execute(f"SELECT tokens FROM `{LIMITS}` WHERE name = 'jobs.default'")
    assert -0.01 < float(sql.fetchone()[0]) < 1, "an empty claim spends nothing"


def test_a_queue_max_running_counts_the_jobs_of_live_runs(env: JobsEnv, sql: pymysql.cursors.Cursor) -> None:
    limited, store = _default_queue(env, Limits(max_running=7))
    limiter = Limiter([store], LIMITS)
    limiter.claim(store, 1000)
    assert store.claimed_rows == 7
    assert limiter.claim(store, 1000) == []
    runs = limited.settings.jobs.runs_table
    # Its runs start under a worker that dies: their jobs stop counting when the leases run out.
    sql.execute(f"UPDATE `{runs}` SET dc_state = 2, lease_until = NOW(6) - INTERVAL 1 SECOND")
    limiter.claim(store, 1000)
    assert store.claimed_rows == 7
