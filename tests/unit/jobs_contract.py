"""The contract of duecast.testing.Jobs: scenarios run both through the in-memory helper
(tests/unit/testing) and through real MariaDB, Redis, dispatcher and worker
(tests/integration/jobs/test_testing_contract.py), so the helper cannot drift from the worker.

`tasks` is the app both run (a worker loads it as `tests.unit.jobs_contract:tasks`); each task records
what it saw in RUNS.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from duecast import Ack, Registry, current_job

tasks = Registry()
RUNS: list[tuple[str, Any, int]] = []  # (task, payload, attempt) per call


def _seen(name: str, payload: Any) -> None:
    RUNS.append((name, payload, current_job().attempt))


@tasks.task("ok")
def ok(payload: Any) -> None:
    _seen("ok", payload)


@tasks.task("async_ok")
async def async_ok(payload: Any) -> None:
    _seen("async_ok", payload)


@tasks.task("flaky")
def flaky(payload: Any) -> None:
    _seen("flaky", payload)
    if current_job().errors < payload["fail_times"]:
        raise RuntimeError(f"flaky failure {current_job().errors + 1}")


@tasks.task("always_fails")
def always_fails(payload: Any) -> None:
    _seen("always_fails", payload)
    raise ValueError("boom")


@tasks.task("snooze")
def snooze(payload: Any) -> Ack | None:
    _seen("snooze", payload)
    return Ack.retry(delay_s=30) if current_job().attempt == 1 else None


@tasks.task("discard")
def discard(payload: Any) -> Ack:
    _seen("discard", payload)
    return Ack.discard("bad input")


@tasks.task("touches")
def touches(payload: Any) -> Ack:
    _seen("touches", payload)
    return Ack.touch()  # not for jobs: a failure of the run


@tasks.task("junk")
def junk(payload: Any) -> Any:
    _seen("junk", payload)
    return {1, 2}  # neither an Ack nor a JSON value: a failure of the run


@tasks.task("answers")
def answers(payload: Any) -> Any:
    _seen("answers", payload)
    return {"total": payload * 2, "items": [1.5, None, "é"]}  # the job's result


@dataclass(frozen=True)
class Seen:
    """A job as a scenario checks it."""

    state: str  # pending | done | dead
    errors: int
    last_error: str | None
    result: Any = None  # the task's return value kept with the done job


class Driver(Protocol):
    def enqueue(self, task: str, payload: Any = None, **options: Any) -> int: ...
    def settle(self) -> None:
        """Run jobs, letting time pass, until none is pending."""

    def seen(self, job_id: int) -> Seen: ...


def only_ok(d: Driver) -> None:
    job = d.enqueue("ok", {"a": [1, 2], "text": "héllo"})
    d.settle()
    assert d.seen(job) == Seen("done", 0, None)
    assert RUNS == [("ok", {"a": [1, 2], "text": "héllo"}, 1)]


def async_task(d: Driver) -> None:
    job = d.enqueue("async_ok", [1, None, True])
    d.settle()
    assert d.seen(job).state == "done"
    assert RUNS == [("async_ok", [1, None, True], 1)]


def retried_until_done(d: Driver) -> None:
    job = d.enqueue("flaky", {"fail_times": 2}, max_attempts=5)
    d.settle()
    seen = d.seen(job)
    assert (seen.state, seen.errors) == ("done", 2)
    assert seen.last_error is not None
    assert "RuntimeError: flaky failure 2" in seen.last_error
    assert [attempt for _, _, attempt in RUNS] == [1, 2, 3]


def dead_after_max_attempts(d: Driver) -> None:
    job = d.enqueue("always_fails", None, max_attempts=2)
    d.settle()
    seen = d.seen(job)
    assert (seen.state, seen.errors) == ("dead", 2)
    assert seen.last_error is not None
    assert seen.last_error.rstrip().endswith("ValueError: boom")
    assert len(RUNS) == 2


def snoozed_is_not_an_error(d: Driver) -> None:
    job = d.enqueue("snooze")
    d.settle()
    assert d.seen(job) == Seen("done", 0, None)
    assert [attempt for _, _, attempt in RUNS] == [1, 2]


def discarded_is_dead_at_once(d: Driver) -> None:
    job = d.enqueue("discard", max_attempts=5)
    d.settle()
    assert d.seen(job) == Seen("dead", 0, "discarded by its task: bad input")


def touch_from_a_task_fails_it(d: Driver) -> None:
    job = d.enqueue("touches", max_attempts=1)
    d.settle()
    seen = d.seen(job)
    assert (seen.state, seen.errors) == ("dead", 1)
    assert seen.last_error is not None
    assert "InvalidAck: a job's handler may not return Ack.touch(); use retry or discard" in seen.last_error


def junk_result_fails_it(d: Driver) -> None:
    job = d.enqueue("junk", max_attempts=1)
    d.settle()
    seen = d.seen(job)
    assert (seen.state, seen.errors) == ("dead", 1)
    assert seen.last_error is not None
    wanted = "TypeError: a task must return None, an Ack or a JSON value (its result), not set"
    assert wanted in seen.last_error


def result_kept_with_the_done_job(d: Driver) -> None:
    job = d.enqueue("answers", 21)
    d.settle()
    assert d.seen(job) == Seen("done", 0, None, {"total": 42, "items": [1.5, None, "é"]})


def unknown_task_is_dead_at_once(d: Driver) -> None:
    job = d.enqueue("nobody_registers_this", {"x": 1}, max_attempts=5)
    d.settle()
    seen = d.seen(job)
    assert (seen.state, seen.errors) == ("dead", 0)
    assert seen.last_error is not None
    assert "no task named 'nobody_registers_this' is registered" in seen.last_error


def unique_key_kept(d: Driver) -> None:
    first = d.enqueue("ok", 1, unique_key="k", delay_s=60)
    second = d.enqueue("ok", 2, unique_key="k", on_duplicate="keep")
    assert second == first
    assert getattr(second, "merged", False)
    d.settle()
    assert RUNS == [("ok", 1, 1)]


SCENARIOS: list[Callable[[Driver], None]] = [
    only_ok,
    async_task,
    retried_until_done,
    dead_after_max_attempts,
    snoozed_is_not_an_error,
    discarded_is_dead_at_once,
    touch_from_a_task_fails_it,
    junk_result_fails_it,
    result_kept_with_the_done_job,
    unknown_task_is_dead_at_once,
    unique_key_kept,
]
