"""A task's fleet-wide limits (`[jobs.task_limits.<task>]`) at claim time on real MariaDB: the task's
jobs are left out of its queue's claim and claimed into runs of their own, under one bucket for every
queue; max_running counts its runs dispatched or started under a live lease; other tasks' jobs are
claimed as before, and the queue's claim SQL is unchanged where no task is limited."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from dataclasses import asdict
from typing import Any

import pymysql
import pytest
from rich.console import Console

from duecast.cli.status_limits import limits_table
from duecast.dispatcher.limits import Limiter
from duecast.dispatcher.main import serve as serve_dispatcher
from duecast.shared.api.enqueue import Job
from duecast.shared.process.failures import StartupError
from duecast.shared.process.runtime import build_stores
from duecast.shared.queries.job_runs import skip_tasks
from duecast.shared.settings import DispatcherSettings
from duecast.shared.settings.limits import Limits
from duecast.shared.storage.admin import migrate
from duecast.shared.storage.leased.jobs import JobStore
from duecast.shared.storage.leased.members import decode_members
from duecast.shared.storage.limits import read_limits
from duecast.shared.storage.schema import SchemaError, check_jobs_table
from tests.integration.jobs.jobs_env import APP, JobsEnv

pytestmark = pytest.mark.integration
LIMITS = DispatcherSettings().limits_table
SLOW = "record_slowly"  # the limited task; "record" is not


@pytest.fixture(autouse=True)
def fresh_buckets(sql: pymysql.cursors.Cursor) -> Iterator[None]:
    yield
    sql.execute(f"DELETE FROM `{LIMITS}`")


def _limited(env: JobsEnv, run_size: int = 4, **jobs: Any) -> tuple[JobsEnv, dict[str, JobStore]]:
    # model_copy does not validate: the limits as the settings would hold them.
    for key in ("limits", "task_limits"):
        if key in jobs:
            jobs[key] = {name: Limits(**lim) for name, lim in jobs[key].items()}
    limited = env.with_jobs(run_size=run_size, **jobs)
    migrate.apply(limited.settings)  # dc_task on the jobs table, where tasks are limited
    stores = build_stores(limited.settings, limited.settings.all_sources())
    by_queue = {s.queue: s for s in stores if isinstance(s, JobStore)}
    return limited, by_queue


def _enqueue(env: JobsEnv, task: str, n: int, queue: str = "default") -> None:
    env.enqueuer.enqueue_many(Job(task, i, queue=queue) for i in range(n))


def _task_runs(env: JobsEnv) -> list[tuple[Any, ...]]:
    return env.runs("task", "jobs", "queue", "dc_state")


def test_a_task_rate_binds_its_jobs_alone_into_runs_of_their_own(env: JobsEnv) -> None:
    limited, stores = _limited(env, task_limits={SLOW: {"rate_limit_per_s": 1, "rate_burst": 5}})
    _enqueue(limited, SLOW, 20)
    _enqueue(limited, "record", 20)
    store = stores["default"]
    limiter = Limiter([store], LIMITS)
    limiter.claim(store, 1000)
    assert store.claimed_rows == 25, "every record job, and the limited task's burst of 5"
    runs = _task_runs(limited)
    assert sum(n for t, n, _, _ in runs if t == SLOW) == 5
    assert sum(n for t, n, _, _ in runs if t is None) == 20
    # Each run holds one task's jobs only: the limited task's runs name it.
    for members, task in limited.runs("members", "task"):
        tasks = {limited.job(i, "task")[0] for i in decode_members(members)}
        assert tasks == {task or "record"}
    assert limiter.claim(store, 1000) == [], "its bucket is empty, and nothing else is due"
    assert store.task_claimed == {}


def test_one_task_bucket_holds_across_queues(env: JobsEnv) -> None:
    limited, stores = _limited(env, task_limits={SLOW: {"rate_limit_per_s": 1, "rate_burst": 6}})
    _enqueue(limited, SLOW, 10, queue="critical")
    _enqueue(limited, SLOW, 10, queue="default")
    limiter = Limiter(list(stores.values()), LIMITS)
    for store in stores.values():
        limiter.claim(store, 1000)
    assert sum(n for _, n, _, _ in _task_runs(limited)) == 6, "one bucket of 6 for both queues"


def test_a_task_max_running_counts_its_live_runs_in_every_queue(env: JobsEnv) -> None:
    limited, stores = _limited(env, task_limits={SLOW: {"max_running": 7}})
    _enqueue(limited, SLOW, 10, queue="critical")
    _enqueue(limited, SLOW, 10, queue="default")
    limiter = Limiter(list(stores.values()), LIMITS)
    for store in stores.values():
        limiter.claim(store, 1000)
    assert sum(n for _, n, _, _ in _task_runs(limited)) == 7
    for store in stores.values():
        assert limiter.claim(store, 1000) == []
    # Its runs start under a worker that dies: their jobs stop counting when the leases run out.
    runs = limited.settings.jobs.runs_table
    limited.sql.execute(f"UPDATE `{runs}` SET dc_state = 2, lease_until = NOW(6) - INTERVAL 1 SECOND")
    for store in stores.values():
        limiter.claim(store, 1000)
    assert sum(n for _, n, _, st in _task_runs(limited) if st != 2) == 7


def test_a_task_run_given_back_is_the_tasks_to_claim_not_the_queues(env: JobsEnv) -> None:
    limited, stores = _limited(env, task_limits={SLOW: {"max_running": 3}})
    _enqueue(limited, SLOW, 3)
    store = stores["default"]
    limiter = Limiter([store], LIMITS)
    limiter.claim(store, 1000)
    runs = limited.settings.jobs.runs_table
    limited.sql.execute(f"UPDATE `{runs}` SET dc_state = 0")  # given back (its entry was lost)
    _enqueue(limited, "record", 2)
    entries = limiter.claim(store, 1000)
    assert store.returning == 1, "the task's run, given back, comes back ahead"
    assert store.claimed_rows == 5, "the task's run again, then the record jobs"
    assert sorted((t or "", n) for t, n, _, _ in _task_runs(limited)) == [("", 2), (SLOW, 3)]
    assert len(entries) == 2


def test_a_queue_limit_bounds_its_limited_tasks_too(env: JobsEnv) -> None:
    limited, stores = _limited(
        env,
        limits={"default": {"rate_limit_per_s": 1, "rate_burst": 4}},
        task_limits={SLOW: {"rate_limit_per_s": 1, "rate_burst": 10}},
    )
    _enqueue(limited, SLOW, 10)
    store = stores["default"]
    Limiter([store], LIMITS).claim(store, 1000)
    assert store.claimed_rows == 4
    limited.sql.execute(f"SELECT tokens FROM `{LIMITS}` WHERE name = 'task:{SLOW}'")
    assert 5.9 < float(limited.sql.fetchone()[0]) < 7, "only what was taken is spent"


def test_the_task_claim_reads_its_own_index(env: JobsEnv) -> None:
    limited, stores = _limited(env, task_limits={SLOW: {"rate_limit_per_s": 100}})
    tasks = stores["default"].tasks
    assert tasks is not None
    explain = tasks.sql.read_due.replace(
        "SELECT COUNT(*), JSON_ARRAYAGG", "EXPLAIN SELECT COUNT(*), JSON_ARRAYAGG"
    )
    limited.sql.execute(explain, (SLOW, "default", 10))
    plan = [
        dict(zip([d[0] for d in limited.sql.description], row, strict=True)) for row in limited.sql.fetchall()
    ]
    assert any(p["key"] == "dc_task" for p in plan), plan


def test_task_limits_need_the_runs_tables_task_column(env: JobsEnv) -> None:
    limited, _ = _limited(env, task_limits={SLOW: {"max_running": 1}})
    runs = limited.settings.jobs.runs_table
    limited.sql.execute(f"ALTER TABLE `{runs}` DROP INDEX `dc_task`, DROP COLUMN `task`")
    with pytest.raises(SchemaError, match=r"needs the `task` column of .*; run `duecast migrate`"):
        check_jobs_table(limited.sql, limited.settings.jobs)
    migrate.apply(limited.settings)
    check_jobs_table(limited.sql, limited.settings.jobs)


def _recorded(store: JobStore) -> list[str]:
    """The statements the store's units run from now on, as sent (before their arguments)."""
    seen: list[str] = []
    real = store.db.transaction

    @contextlib.contextmanager
    def recording(**kw: Any) -> Iterator[Any]:
        with real(**kw) as cur:
            execute = cur.execute

            def record(stmt: str, args: Any = None) -> Any:
                seen.append(stmt)
                return execute(stmt, args)

            cur.execute = record  # type: ignore[method-assign]
            yield cur

    store.db.transaction = recording  # type: ignore[method-assign]
    return seen


def test_without_task_limits_the_queues_claim_is_as_before(env: JobsEnv) -> None:
    """No task limited: the claim runs only the queue's own statements, byte for byte (no `task`)."""
    plain = env.with_jobs(run_size=4)
    store = plain.store()
    assert store.tasks is None
    _enqueue(plain, "record", 10)
    seen = _recorded(store)
    Limiter([store], LIMITS).claim(store, 1000)
    plain.sql.execute(f"UPDATE `{plain.settings.jobs.runs_table}` SET dc_state = 0")  # given back
    store._behind_at = -1e9  # and a look behind the cursors
    Limiter([store], LIMITS).claim(store, 1000)
    known = {skip_tasks(stmt, 0) for stmt in asdict(store.runs).values()}
    exact = {k for k in known if "{" not in k}
    formatted = [k.split("{")[0] for k in known if "{" in k]  # ids, rows: filled in per claim
    assert seen, "the claim ran nothing"
    for stmt in seen:
        assert stmt in exact or any(stmt.startswith(f) for f in formatted), stmt
    assert not [stmt for stmt in seen if "`task`" in stmt], "a statement names the task"


def test_a_limit_on_a_task_the_dispatchers_app_lacks_refuses_the_start(env: JobsEnv) -> None:
    limited = env.with_jobs(task_limits={"recrod": Limits(max_running=1)})
    settings = limited.settings.model_copy(
        update={"dispatcher": limited.settings.dispatcher.model_copy(update={"app": APP})}
    )
    migrate.apply(settings)
    with pytest.raises(StartupError, match=r"jobs.task_limits names recrod, not a task of dispatcher.app"):
        serve_dispatcher(settings, threading.Event(), drain=True)


def test_status_shows_a_tasks_limits_as_task_name(env: JobsEnv) -> None:
    limited, stores = _limited(
        env, task_limits={SLOW: {"rate_limit_per_s": 1, "rate_burst": 5, "max_running": 9}}
    )
    _enqueue(limited, SLOW, 3)
    store = stores["default"]
    Limiter([store], LIMITS).claim(store, 1000)
    jobs = limited.settings.jobs
    (state,) = read_limits(store.db, LIMITS, limited.settings.all_sources(), jobs)
    assert (state.name, state.rate_limit_per_s, state.burst, state.max_running) == (f"task:{SLOW}", 1, 5, 9)
    assert state.tokens is not None
    assert 2 <= state.tokens < 2.5, "5 less the 3 jobs claimed"
    table = limits_table([state])
    assert table is not None
    console = Console(width=200, record=True)
    console.print(table)
    assert f"task:{SLOW}" in console.export_text()
