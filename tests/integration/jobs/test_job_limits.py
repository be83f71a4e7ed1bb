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


def _default_queue(env: JobsEnv, limits: Limits, run_size: int = 4) -> tuple[JobsEnv, JobStore]:
    limited = env.with_jobs(limits={"default": limits}, run_size=run_size)
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


def test_a_run_given_back_whole_waits_until_it_fits_under_max_running(
    env: JobsEnv, sql: pymysql.cursors.Cursor
) -> None:
    limited, store = _default_queue(env, Limits(max_running=7), run_size=5)
    runs = limited.settings.jobs.runs_table
    limiter = Limiter([store], LIMITS)
    limiter.claim(store, 1000)
    assert store.claimed_rows == 7  # runs of 5 and 2
    # The 5-run's worker dies: its lease runs out, so its slots count no more, and a fresh run of 5
    # takes them; then redelivery gives the dead run back whole (pending).
    sql.execute(f"UPDATE `{runs}` SET dc_state = 2, lease_until = NOW(6) - INTERVAL 1 SECOND WHERE jobs = 5")
    (dead,) = [int(r) for (r,) in _query(sql, f"SELECT id FROM `{runs}` WHERE dc_state = 2")]
    limiter.claim(store, 1000)
    assert store.claimed_rows == 5
    sql.execute(f"UPDATE `{runs}` SET dc_state = 0, lease_until = NULL WHERE id = %s", (dead,))
    sql.execute(f"DELETE FROM `{runs}` WHERE jobs = 2")  # the 2-run finished: 2 slots free
    assert limiter.claim(store, 1000) == [], "the dead run (5 jobs) was claimed into 2 free slots"
    sql.execute(f"DELETE FROM `{runs}` WHERE jobs = 5 AND id <> %s", (dead,))  # 7 slots free
    assert dead in [e.id for e in limiter.claim(store, 1000)]
    assert store.claimed_rows == 7


def _query(sql: pymysql.cursors.Cursor, stmt: str) -> list[tuple[object, ...]]:
    sql.execute(stmt)
    return list(sql.fetchall())
