"""duecast.testing.Jobs beyond the shared contract: inline mode, the clock, the assertions, time
limits, transactional tasks and use from async tests. No server."""

from __future__ import annotations

import asyncio
import threading
from typing import Any
from unittest.mock import ANY

import pytest

from duecast import Ack, EnqueueError, Job, Registry, current_job
from duecast.shared.api.enqueue import DuplicateJob
from duecast.shared.settings import JobsSettings
from duecast.testing import JobDead, Jobs, TestingError, TimedOut
from tests.unit.rules.test_handlers_async import arun

app = Registry()
calls: list[tuple[str, Any]] = []
release = threading.Event()


@app.task("record")
def record(payload: Any) -> None:
    calls.append(("record", payload))


@app.task("fan_out")
def fan_out(payload: Any) -> None:
    calls.append(("fan_out", payload))
    for n in range(payload):
        HARNESS[0].enqueue("record", n)


@app.task("fails")
def fails(payload: Any) -> None:
    calls.append(("fails", current_job().attempt))
    raise KeyError("missing")


@app.task("exits")
def exits(payload: Any) -> None:
    raise SystemExit(2)  # argparse in a library: a failure of this call, not of the test run


@app.task("hangs", timeout_s=0.2)
def hangs(payload: Any) -> None:
    release.wait(5)


@app.task("slow_async", timeout_s=0.2)
async def slow_async(payload: Any) -> None:
    await asyncio.sleep(5)


@app.task("later")
def later(payload: Any) -> Ack | None:
    calls.append(("later", current_job().attempt))
    return Ack.retry(delay_s=3600) if current_job().attempt == 1 else None


@app.task("writes", transactional=True)
def writes(payload: Any, cursor: Any) -> None:
    cursor.execute("INSERT INTO audit VALUES (%s)", (payload,))


HARNESS: list[Jobs] = []


@pytest.fixture(autouse=True)
def _fresh() -> None:
    calls.clear()
    HARNESS.clear()


def test_inline_runs_at_once_and_runs_what_the_task_enqueues() -> None:
    jobs = Jobs(app, inline=True)
    HARNESS.append(jobs)
    job_id = jobs.enqueue("fan_out", 2)
    assert calls == [("fan_out", 2), ("record", 0), ("record", 1)]
    assert jobs.get(job_id).state == "done"
    assert [j.state for j in jobs.all("record")] == ["done", "done"]


def test_inline_raises_jobdead_with_the_last_error_after_every_attempt() -> None:
    jobs = Jobs(app, inline=True)
    with pytest.raises(JobDead, match=r"job 1 \(fails\) is dead: KeyError: .missing.$") as caught:
        jobs.enqueue("fails", max_attempts=3)
    assert isinstance(caught.value.__cause__, KeyError)
    assert calls == [("fails", 1), ("fails", 2), ("fails", 3)]
    assert caught.value.job.errors == 3


def test_manual_mode_keeps_jobs_until_drain_and_asserts_on_them() -> None:
    jobs = Jobs(app)
    jobs.enqueue("record", {"to": "a@example.com", "n": 1}, queue="default", priority=3)
    assert calls == []
    found = jobs.assert_enqueued("record", payload={"to": "a@example.com", "n": ANY}, priority=3)
    assert found[0].payload == {"to": "a@example.com", "n": 1}
    jobs.assert_not_enqueued("record", payload={"to": "b@example.com"})
    with pytest.raises(AssertionError, match=r"found 0; pending:\n  record default p3"):
        jobs.assert_enqueued("record", payload={"to": "b@example.com"})
    with pytest.raises(AssertionError, match="matches"):
        jobs.assert_not_enqueued("record")
    assert jobs.drain().done == 1
    jobs.assert_enqueued("record", count=0)


def test_drain_honours_delays_and_priorities_on_its_own_clock() -> None:
    jobs = Jobs(app)
    jobs.enqueue("record", "in an hour", delay_s=3600)
    jobs.enqueue("record", "low", priority=9)
    jobs.enqueue("record", "high", priority=0)
    start = jobs.now
    assert jobs.drain(with_scheduled=False).runs == 2
    assert calls == [("record", "high"), ("record", "low")]
    jobs.advance(3599)
    assert jobs.drain(with_scheduled=False).runs == 0
    jobs.advance(1)
    assert jobs.drain(with_scheduled=False).runs == 1
    assert (jobs.now - start).total_seconds() == 3600


def test_a_retry_waits_its_delay_and_backoff_is_the_workers_policy() -> None:
    jobs = Jobs(app, jobs=JobsSettings(retry_base_s=10, retry_cap_s=10))
    jobs.enqueue("later")
    jobs.enqueue("fails", max_attempts=2)
    start = jobs.now
    result = jobs.drain(with_scheduled=False)
    assert (result.runs, result.retried) == (2, 2)
    failed = jobs.all("fails")[0]
    # retry_delay_s(1, 10, 10): equal jitter, between half the step and the step
    assert 5 <= (failed.run_at - start).total_seconds() <= 10
    result = jobs.drain()
    assert (result.done, result.dead) == (1, 1)
    assert (jobs.now - start).total_seconds() == 3600  # the clock went to the snoozed job's time


def test_systemexit_from_a_task_is_a_failure_of_that_run() -> None:
    jobs = Jobs(app)
    job_id = jobs.enqueue("exits", max_attempts=1)
    assert jobs.drain().dead == 1
    assert "SystemExit: 2" in (jobs.get(job_id).last_error or "")


def test_time_limits_as_the_worker_applies_them() -> None:
    jobs = Jobs(app)
    plain = jobs.enqueue("hangs", max_attempts=1)
    coro = jobs.enqueue("slow_async", max_attempts=1)
    try:
        assert jobs.drain().dead == 2
    finally:
        release.set()
    for job_id in (plain, coro):
        assert "the handler ran longer than its timeout_s (0.2s)" in (jobs.get(job_id).last_error or "")
    assert issubclass(TimedOut, TimeoutError)


def test_transactional_task_gets_the_cursor_given_or_a_one_line_error() -> None:
    class Cursor:
        def __init__(self) -> None:
            self.statements: list[tuple[str, Any]] = []

        def execute(self, sql: str, args: Any = None) -> int:
            self.statements.append((sql, args))
            return 1

    cursor = Cursor()
    jobs = Jobs(app, cursor=cursor)
    jobs.enqueue("writes", 7)
    assert jobs.drain().done == 1
    assert cursor.statements == [("INSERT INTO audit VALUES (%s)", (7,))]
    without = Jobs(app)
    without.enqueue("writes", 7)
    with pytest.raises(TestingError, match=r"Jobs\(cursor=\.\.\.\)"):
        without.drain()


def test_enqueue_checks_as_the_enqueuer_does() -> None:
    jobs = Jobs(app, tasks=app.task_names)
    with pytest.raises(EnqueueError, match="unknown task 'nope'"):
        jobs.enqueue("nope")
    with pytest.raises(EnqueueError, match="not JSON-serialisable"):
        jobs.enqueue("record", {1, 2})
    with pytest.raises(EnqueueError, match="unknown queue"):
        jobs.enqueue("record", queue="elsewhere")
    jobs.enqueue("record", 1, unique_key="k")
    with pytest.raises(DuplicateJob):
        jobs.enqueue_many([Job("record", 2), Job("record", 3, unique_key="k")])
    assert [j.payload for j in jobs.all()] == [1]  # all or nothing


def test_from_an_async_test_adrain_and_drain_both_run_async_tasks() -> None:
    jobs = Jobs(app)

    async def scenario() -> tuple[int, int]:
        await jobs.aenqueue("slow_async", max_attempts=1)
        await jobs.aenqueue("record", "x")
        first = await jobs.adrain()
        await jobs.aenqueue("record", "y")
        second = jobs.drain()  # a sync call inside a running loop still works
        return first.runs, second.runs

    assert arun(scenario()) == (2, 1)
    assert calls == [("record", "x"), ("record", "y")]


def test_running_needs_the_registry() -> None:
    jobs = Jobs()
    jobs.enqueue("anything")
    with pytest.raises(TestingError, match=r"Jobs\(registry\)"):
        jobs.drain()
