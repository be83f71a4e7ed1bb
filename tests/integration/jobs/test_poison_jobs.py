"""Outcomes the database once refused, on real MariaDB (issue 25, items 1, 7, 13): each fails, or is
discarded, alone and is logged; its run-mates are acked in the same pass; nothing stays RUNNING."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from duecast.shared.limits import ERROR_TEXT_MAX
from duecast.shared.states import State
from duecast.shared.storage.leased import store
from tests.integration import poison_app
from tests.integration.jobs.jobs_env import JobsEnv

pytestmark = pytest.mark.integration

APP = "tests.integration.poison_app"
FAILED = [
    "surrogate",
    "exit",
    "retry_far",
    "retry_20y",
    "retry_at_end",
    "forged nan",
    "forged inf",
    "forged -1e12",
    "forged 1e18",
]
DISCARDED = ["discard_surrogate", "discard_huge"]


def _poisoned(env: JobsEnv) -> tuple[JobsEnv, dict[str, int], list[int]]:
    env = env.with_app(APP, poison_app.handlers.task_names)
    ok = [env.enqueuer.enqueue("ok") for _ in range(3)]
    poisons = {p: env.enqueuer.enqueue("poison", p) for p in FAILED + DISCARDED}
    ok += [env.enqueuer.enqueue("ok") for _ in range(3)]
    return env, poisons, ok


def test_a_poison_outcome_fails_alone_and_its_run_mates_are_acked_in_one_pass(
    env: JobsEnv, caplog: pytest.LogCaptureFixture
) -> None:
    env, poisons, ok = _poisoned(env)
    with caplog.at_level(logging.WARNING):
        env.run_once()

    assert not any(env.exists(i) for i in ok)  # done (and deleted: no retention)
    assert env.runs("id") == []  # every run finished: no job RUNNING under a renewed lease
    for payload in FAILED:
        state, errors, error = env.job(poisons[payload], "dc_state", "errors", "last_error")
        assert (state, errors) == (State.IDLE, 1), payload  # a failure, retried per policy
        assert error, payload
    state, error = env.job(poisons["discard_surrogate"], "dc_state", "last_error")
    assert state == State.DEAD
    assert error == "discarded by its task: bad file report-\\udcff.csv"
    state, error = env.job(poisons["discard_huge"], "dc_state", "last_error")
    assert state == State.DEAD
    assert len(error) <= ERROR_TEXT_MAX
    assert error.endswith("...(truncated)")

    def error_of(payload: str) -> Any:
        return env.job(poisons[payload], "last_error")[0]

    assert "RuntimeError: cannot open report-\\udcff.csv" in error_of("surrogate")
    assert "SystemExit: 2" in error_of("exit")
    # Past the most jobs.max_delay_s allows: refused by the constructor, in the task (a traceback).
    assert "ValueError: delay_s must be 0-3162240000 s (the most jobs" in error_of("retry_far")
    assert "ValueError: Ack.retry(at=...) must be between 1970 and" in error_of("retry_at_end")
    # Within that, past jobs.max_delay_s (10 years), as at enqueue: refused by the store, an invalid ack.
    assert "Ack.retry(): delay_s must be 0-315360000 s (jobs.max_delay_s)" in error_of("retry_20y")
    for forged in ("nan", "inf"):
        assert "delay_s must be a finite number" in error_of(f"forged {forged}")
    for forged in ("-1e12", "1e18"):
        assert "delay_s must be 0-315360000 s" in error_of(f"forged {forged}")
    # The handler's own error is logged, naming the job (the surrogate escaped, as stored).
    failed = [r for r in caplog.records if getattr(r, "event", None) == "worker.handler_failed"]
    assert poisons["surrogate"] in {r.job_id for r in failed}  # type: ignore[attr-defined]
    invalid = [r.getMessage() for r in caplog.records if getattr(r, "event", None) == "worker.invalid_ack"]
    assert any(f"id={poisons['retry_20y']}: Ack.retry(): delay_s must be 0-315360000" in m for m in invalid)


def test_a_retry_the_database_refuses_fails_its_job_alone(
    env: JobsEnv, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the store's own check taken away, NOW(6) + 1e24 microseconds reaches MariaDB: 1916, an
    OperationalError, once outside the "value errors" and retried 4-5 times a second forever."""
    monkeypatch.setattr(store, "check_times", lambda ack, max_delay_s, now=None: None)
    env = env.with_app(APP, poison_app.handlers.task_names)
    ok = [env.enqueuer.enqueue("ok") for _ in range(2)]
    bad = env.enqueuer.enqueue("poison", "forged 1e18")
    with caplog.at_level(logging.WARNING):
        env.run_once()
    assert not any(env.exists(i) for i in ok)
    assert env.runs("id") == []
    state, errors, error = env.job(bad, "dc_state", "errors", "last_error")
    assert (state, errors) == (State.IDLE, 1)
    assert "the database refused its Ack.retry()" in error
    refused = [r.getMessage() for r in caplog.records if getattr(r, "event", None) == "job.ack_refused"]
    assert len(refused) == 1
    assert f"job {bad} of queue default" in refused[0]


def test_a_transactional_task_raising_system_exit_fails_alone_and_the_worker_goes_on(
    env: JobsEnv, caplog: pytest.LogCaptureFixture
) -> None:
    env = env.with_app(APP, poison_app.handlers.task_names)
    bad = env.enqueuer.enqueue("exit_in_transaction")
    ok = [env.enqueuer.enqueue("ok") for _ in range(2)]
    with caplog.at_level(logging.ERROR):
        env.run_once()  # SystemExit would end the worker here, its run left RUNNING
    logged = [r.getMessage() for r in caplog.records if getattr(r, "event", None) == "job.handler_failed"]
    assert logged == [f"job {bad} of queue default failed in its ack transaction: SystemExit(3)"]
    assert not any(env.exists(i) for i in ok)
    state, errors, error = env.job(bad, "dc_state", "errors", "last_error")
    assert (state, errors) == (State.IDLE, 1)
    assert "SystemExit: 3" in error
