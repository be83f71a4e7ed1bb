"""duecast.testing.Jobs.cancel, as Enqueuer.cancel on a worker: a pending or scheduled job is
cancelled and never runs; a running plain task sees `current_job().cancelled` and its failure is not
retried; a running `async def` task is cancelled. No server."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from duecast import Registry, current_job
from duecast.shared.api.context import cancel_held, held_jobs
from duecast.testing import Jobs
from tests.unit.rules.test_handlers_async import arun

app = Registry()
seen: list[tuple[str, Any]] = []
HARNESS: list[Jobs] = []


@app.task("record")
def record(payload: Any) -> None:
    seen.append(("record", payload))


@app.task("cancels_itself")
def cancels_itself(payload: Any) -> None:
    job = current_job()
    seen.append(("before", job.cancelled))
    assert HARNESS[0].cancel(job.id) == 1
    seen.append(("after", job.cancelled))
    raise RuntimeError("stopping early")  # with attempts left: retried, were it not cancelled


@app.task("async_cancels_itself")
async def async_cancels_itself(payload: Any) -> None:
    HARNESS[0].cancel(current_job().id)
    try:
        await asyncio.sleep(30)
    except asyncio.CancelledError:
        seen.append(("cancelled", current_job().cancelled))
        raise
    seen.append(("slept", None))


@pytest.fixture(autouse=True)
def _fresh() -> None:
    seen.clear()
    HARNESS.clear()


def test_pending_and_scheduled_jobs_are_cancelled_and_never_run() -> None:
    jobs = Jobs(app)
    now, later, kept = (
        jobs.enqueue("record", p, delay_s=d) for p, d in (("now", 0), ("later", 60), ("kept", 0))
    )
    assert jobs.cancel([now, later]) == 2
    assert jobs.cancel(now) == 0  # cancelled already
    drained = jobs.drain()
    assert (drained.runs, drained.done) == (1, 1)
    assert seen == [("record", "kept")]
    assert [j.id for j in jobs.all(state="cancelled")] == [now, later]
    assert jobs.cancel(kept) == 0  # done
    assert jobs.get(now).finished_at is not None


def test_a_cancel_frees_the_unique_key() -> None:
    jobs = Jobs(app)
    job = jobs.enqueue("record", 1, unique_key="k")
    jobs.cancel(job)
    assert not jobs.enqueue("record", 2, unique_key="k").merged


def test_a_running_plain_task_sees_it_and_its_failure_is_not_retried() -> None:
    jobs = Jobs(app)
    HARNESS.append(jobs)
    job = jobs.enqueue("cancels_itself", max_attempts=5)
    drained = jobs.drain()
    assert (drained.runs, drained.cancelled, drained.retried) == (1, 1, 0)
    assert seen == [("before", False), ("after", True)]
    record = jobs.get(job)
    assert (record.state, record.errors, record.attempt, record.last_error) == ("cancelled", 0, 0, None)
    assert held_jobs() == []  # the run is over: nothing held


def test_a_running_async_task_is_cancelled() -> None:
    jobs = Jobs(app)
    HARNESS.append(jobs)
    job = jobs.enqueue("async_cancels_itself")
    drained = arun(jobs.adrain())
    assert (drained.runs, drained.cancelled) == (1, 1)
    assert seen == [("cancelled", True)]
    assert jobs.get(job).state == "cancelled"


def test_inline_a_job_that_cancels_itself_ends_there() -> None:
    jobs = Jobs(app, inline=True)
    HARNESS.append(jobs)
    job = jobs.enqueue("cancels_itself", max_attempts=5)  # no JobDead: cancelled is not a failure
    assert jobs.get(job).state == "cancelled"
    assert len([s for s in seen if s[0] == "before"]) == 1


def test_outside_a_run_nothing_is_held_and_cancelled_reads_false() -> None:
    assert cancel_held([1, 2]) == 0
    assert held_jobs() == []
