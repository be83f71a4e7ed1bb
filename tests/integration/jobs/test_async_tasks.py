"""`async def` tasks run on the worker's event loop, many at once, each acked as it finishes; a task
past its timeout_s is cancelled (async) or given up (plain), counted as a failure and retried."""

from __future__ import annotations

import pytest

from duecast.shared.api.enqueue import Job
from duecast.shared.states import State
from tests.integration import async_app
from tests.integration.jobs.jobs_env import JobsEnv

TALLY = async_app.TALLY


@pytest.fixture
def env(env: JobsEnv) -> JobsEnv:
    """The jobs tables, served by the async app (4 threads for its plain tasks)."""
    TALLY.reset()
    return env.with_app("tests.integration.async_app", async_app.handlers.task_names, concurrency=4)


def test_async_tasks_run_concurrently_and_all_finish(env: JobsEnv) -> None:
    ids = env.enqueuer.enqueue_many(Job("wait", i) for i in range(300))
    env.run_once()
    assert TALLY.runs == {i: 1 for i in range(300)}
    # 300 tasks awaiting 0.2 s each on 4 threads' worth of settings: they overlapped on the loop.
    assert TALLY.peak >= 100
    assert not any(env.exists(i) for i in ids)
    assert {TALLY.jobs[i] for i in range(300)} == set(ids)  # current_job() inside each task


def test_an_async_task_past_its_timeout_is_cancelled_counted_and_retried(env: JobsEnv) -> None:
    hung = env.enqueuer.enqueue("hang", "h")
    ok = env.enqueuer.enqueue_many(Job("wait", i) for i in range(20))
    env.run_once()
    assert all(TALLY.runs[i] == 1 for i in range(20))
    assert not any(env.exists(i) for i in ok)
    state, errors, error = env.job(hung, "dc_state", "errors", "last_error")
    assert (state, errors) == (int(State.IDLE), 1)  # pending again, with backoff
    assert "timeout_s (0.5s)" in error
    assert TALLY.now == 0  # the cancelled task really stopped


def test_a_plain_task_past_its_timeout_is_given_up_while_the_others_finish(env: JobsEnv) -> None:
    stuck = env.enqueuer.enqueue("block", "b")
    ok = env.enqueuer.enqueue_many(Job("plain", i) for i in range(50))
    env.run_once()
    assert all(TALLY.runs[i] == 1 for i in range(50))
    assert not any(env.exists(i) for i in ok)
    state, errors, error = env.job(stuck, "dc_state", "errors", "last_error")
    assert (state, errors) == (int(State.IDLE), 1)
    assert "timeout_s (0.5s)" in error
