"""Dispatcher, worker and sweeper in-process on real MariaDB + Redis, through their production wiring.

Roles run `dispatcher.main.serve` / `worker.main.serve` in drain mode (the production loop, exiting
at its first idle tick); handlers live in tests.integration.apps and record every execution.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from duecast.shared.acks import Ack
from duecast.shared.entries import encode_entry
from duecast.shared.settings import JobsSettings, Settings
from duecast.shared.states import State
from duecast.shared.storage.admin import migrate
from duecast.worker.worker import Worker
from tests.integration import apps
from tests.integration.conftest import Env
from tests.integration.flow.roles_helpers import (
    DISPATCHED,
    IDLE,
    MakeEnv,
    dispatch,
    handled_once,
    role_settings,
    work,
)

pytestmark = pytest.mark.integration


# ---------------------------------------------------------------- the whole path


@pytest.mark.parametrize("kind", [apps.RESCAN, apps.ONEOFF])
def test_every_due_row_is_handled_exactly_once(make_env: MakeEnv, recorder: apps.Recorder, kind: str) -> None:
    n = 5000
    env = make_env("rescan" if kind == apps.RESCAN else "oneoff", rows=n, name=kind)
    settings = role_settings(env, worker={"concurrency": 4})

    dispatch(settings)

    assert env.queue.length(kind) == n
    assert env.count("dc_state = 1 AND dc_attempt = 1") == n
    assert env.queue.stats(kind) == {"claimed": n}
    before_work = env.db_now()

    worker = work(settings)

    handled_once(recorder, kind, range(1, n + 1))
    assert {attempt for _, _, attempt in recorder.runs} == {1}
    if kind == apps.RESCAN:
        assert env.states() == {i: (IDLE, 1) for i in range(1, n + 1)}
        # Each check recorded its slot: at most a period (10 s) before it (shared.queries.pace).
        assert env.count("updated_time <= %s - INTERVAL 10 SECOND", (before_work,)) == 0
    else:
        assert env.count() == 0
    assert env.queue.length(kind) == 0
    assert worker.counts["acked"] == n
    assert env.queue.stats(kind) == {"claimed": n, "popped": n, "started": n, "acked": n}


@pytest.mark.parametrize("kind", [apps.RESCAN, apps.ONEOFF])
def test_two_workers_share_the_list_and_handle_each_row_once(
    make_env: MakeEnv, recorder: apps.Recorder, kind: str
) -> None:
    n = 5000
    env = make_env("rescan" if kind == apps.RESCAN else "oneoff", rows=n, name=kind)
    dispatch(role_settings(env))
    # Two workers on their own connections, as two processes would be (batches under 1000 entries:
    # see test_store_requeue_and_locks' large-batch test for what bigger ones do).
    workers: list[Worker] = []
    settings = [role_settings(env, worker={"pop_batch": p}) for p in (900, 700)]
    threads = [threading.Thread(target=lambda s=s: workers.append(work(s))) for s in settings]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)

    assert len(workers) == 2
    handled_once(recorder, kind, range(1, n + 1))
    assert sum(w.counts["acked"] for w in workers) == n
    assert env.count("dc_state = 1") == 0
    assert env.count() == (n if kind == apps.RESCAN else 0)
    assert env.queue.stats(kind) == {"claimed": n, "popped": n, "started": n, "acked": n}


def test_failed_rows_are_checked_again_at_their_next_period(
    rescan: Callable[..., Env], recorder: apps.Recorder
) -> None:
    env = rescan(200)
    settings = role_settings(env)
    failing = {3, 50, 199}
    recorder.fail_once.update(failing)
    before = env.db_now()

    dispatch(settings)
    first = work(settings)

    assert (first.counts["acked"], first.counts["failed"]) == (197, 3)
    # A failed check counts as a check: the row is due again a period later, as if checked now, and
    # no copy of its entry can run the attempt again (the row no longer runs under it).
    assert env.states() == {i: (IDLE, 1) for i in range(1, 201)}
    assert env.count("updated_time > %s - INTERVAL 10 SECOND", (before,)) == 200  # their slots
    env.queue.push_raw(apps.RESCAN, [encode_entry(i, 1) for i in sorted(failing)])
    assert work(settings).counts["stale_entries"] == 3

    env.query("UPDATE {t} SET updated_time = NOW(6)")  # slots as now: none due for a period
    dispatch(settings)  # nothing is due: every row was checked (or failed) just now
    assert env.count("dc_state = 1") == 0
    env.query("UPDATE {t} SET updated_time = updated_time - INTERVAL 11 SECOND WHERE {pk} IN (3, 50, 199)")
    dispatch(settings)  # their period (10 s) is over
    assert {i for i, s in env.states().items() if s == (DISPATCHED, 2)} == failing
    second = work(settings)

    assert (second.counts["acked"], second.counts["failed"]) == (3, 0)
    assert env.states() == {i: (IDLE, 2 if i in failing else 1) for i in range(1, 201)}
    for i in failing:
        assert recorder.attempts(apps.RESCAN, i) == [1, 2]
    assert recorder.executions(apps.RESCAN) == Counter({i: 2 if i in failing else 1 for i in range(1, 201)})
    assert env.queue.stats(apps.RESCAN) == {
        "claimed": 203,
        "popped": 206,
        "started": 203,
        "acked": 200,
        "failed": 3,
        "stale_entries": 3,
    }


def test_an_ack_setting_a_missing_column_is_a_failure_and_the_row_is_not_acked(
    rescan: Callable[..., Env], recorder: apps.Recorder
) -> None:
    env = rescan(10)
    recorder.acks[5] = Ack.touch(no_such_column=1)
    recorder.acks[6] = Ack.touch(status=2)

    dispatch(role_settings(env))
    worker = work(role_settings(env))

    assert (worker.counts["acked"], worker.counts["failed"]) == (9, 1)
    # Failed: its values are not written, and it is checked again at its next period.
    assert env.states() == {i: (IDLE, 1) for i in range(1, 11)}
    assert dict(env.query("SELECT {pk}, status FROM {t}")) == {i: 2 if i == 6 else 1 for i in range(1, 11)}


OWN_COLUMNS = {"dc_attempt": 0, "dc_state": 1, "dc_dispatched_at": None}


@pytest.mark.parametrize("column", OWN_COLUMNS)
@pytest.mark.parametrize(
    "build",
    [
        pytest.param(lambda column, value: Ack.touch(**{column: value}), id="Ack.touch"),
        pytest.param(
            lambda column, value: Ack("touch", 0.0, ((column, value),)),
            id="Ack-built-directly",
        ),
    ],
)
def test_an_ack_may_not_set_duecasts_own_columns(
    rescan: Callable[..., Env], recorder: apps.Recorder, column: str, build: Callable[[str, Any], Ack]
) -> None:
    env = rescan(3)
    recorder.acks[2] = lambda: build(column, OWN_COLUMNS[column])

    dispatch(role_settings(env))
    worker = work(role_settings(env))

    assert (worker.counts["acked"], worker.counts["failed"]) == (2, 1)
    assert env.states() == {1: (IDLE, 1), 2: (IDLE, 1), 3: (IDLE, 1)}  # 2 failed: due at its next period
    assert env.count("dc_dispatched_at IS NULL") == 0


def test_an_ack_value_the_database_rejects_fails_only_that_row(
    rescan: Callable[..., Env], recorder: apps.Recorder
) -> None:
    env = rescan(10)
    recorder.acks[5] = Ack.touch(status="not a number")

    dispatch(role_settings(env))
    worker = work(role_settings(env))

    assert env.states() == {i: (IDLE, 1) for i in range(1, 11)}  # 5 failed: due at its next period
    assert dict(env.query("SELECT {pk}, status FROM {t}")) == dict.fromkeys(range(1, 11), 1)
    assert (worker.counts["acked"], worker.counts["failed"]) == (9, 1)


# ---------------------------------------------------------------- jobs


@pytest.fixture
def with_jobs(rescan: Callable[..., Env]) -> Iterator[tuple[Env, Settings]]:
    env = rescan()
    jobs = JobsSettings(
        enabled=True, table=f"jobs_{env.table[-8:]}", schedules_table=f"sched_{env.table[-8:]}"
    )
    settings = env.settings.model_copy(update={"jobs": jobs})
    migrate.apply(settings)
    yield env, role_settings(env, worker={"sources": [apps.RESCAN, "jobs"]}).model_copy(update={"jobs": jobs})
    env.sql.execute(f"DROP TABLE IF EXISTS `{jobs.table}`, `{jobs.schedules_table}`")


def test_jobs_run_their_task_once_and_are_deleted(
    with_jobs: tuple[Env, Settings], recorder: apps.Recorder
) -> None:
    env, settings = with_jobs
    table = settings.jobs.table
    env.sql.executemany(
        f"INSERT INTO `{table}` (task, payload, run_at) VALUES (%s, %s, NOW(6) + INTERVAL %s SECOND)",
        [
            ("remember", '{"n": 1}', -5),
            ("remember", '{"n": 2}', -1),
            ("remember", '{"n": 3}', 3600),
            ("no_such_task", "{}", -1),
        ],
    )

    dispatch(settings)
    worker = work(settings)

    assert sorted(p["n"] for p in recorder.tasks) == [1, 2]
    # The unknown task's job is discarded (acked as dead), not failed: no attempt could run it.
    assert (worker.counts["acked"], worker.counts["failed"]) == (3, 0)
    env.sql.execute(f"SELECT task, dc_state, dc_attempt FROM `{table}` ORDER BY id")
    assert env.sql.fetchall()[0] == ("remember", 0, 0)  # not due yet: never dispatched
    env.sql.execute(
        f"SELECT dc_state, dc_attempt, last_error FROM `{table}` WHERE task = 'no_such_task'"
    )
    state, attempt, error = env.sql.fetchone()
    # Dead at once, not retried after a backoff: its error names the task and the registered ones.
    assert (state, attempt) == (State.DEAD, 1)
    assert error.endswith(": no task named 'no_such_task' is registered (registered: remember)")
    assert "Traceback" not in error
    env.sql.execute(f"SELECT COUNT(*) FROM `{table}`")
    assert env.sql.fetchone() == (2,)
