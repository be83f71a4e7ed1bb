"""Stored results (docs/jobs.md, "Results"): a task's return value is kept with its done job and read
back with Enqueuer.result(id); dead jobs read with their error; past the size cap, or with done jobs
not kept, no value is kept and that is said."""

from __future__ import annotations

import json
import logging
import re

import pytest
from rich.console import Console

from duecast.cli.jobs import _show
from duecast.shared.api.enqueue import Enqueuer
from duecast.shared.fanout.client import connect_redis
from duecast.shared.storage.admin.job_admin import JobAdmin
from duecast.shared.storage.db import Database
from tests.integration.jobs.jobs_env import JobsEnv

APP = "tests.unit.jobs_contract:tasks"


def enqueuer_of(env: JobsEnv) -> Enqueuer:
    return Enqueuer(env.settings, connect_redis(env.settings.redis), None)


def test_result_of_a_done_a_dead_and_a_pending_job(env: JobsEnv) -> None:
    env = env.with_jobs(retention_s=3600).with_app(APP, frozenset())
    enqueuer = enqueuer_of(env)
    done = enqueuer.enqueue("answers", 21)
    dead = enqueuer.enqueue("always_fails", max_attempts=1)
    later = enqueuer.enqueue("answers", 1, delay_s=3600)
    before = enqueuer.result(done)
    assert before is not None
    assert (before.state, before.value, before.finished) == ("pending", None, False)
    env.run_once()
    got = enqueuer.result(done)
    assert got is not None
    assert (got.state, got.value, got.error, got.errors, got.attempts) == (
        "done", {"total": 42, "items": [1.5, None, "é"]}, None, 0, 1
    )
    assert got.finished_at is not None
    assert got.finished_at >= got.enqueued_at
    failed = enqueuer.result(dead)
    assert failed is not None
    assert (failed.state, failed.value, failed.errors) == ("dead", None, 1)
    assert failed.error is not None
    assert failed.error.rstrip().endswith("ValueError: boom")
    pending = enqueuer.result(later)
    assert pending is not None
    assert pending.state == "pending"
    assert enqueuer.result(10**12) is None


def test_a_result_over_the_cap_is_not_kept_and_last_error_says_so(env: JobsEnv) -> None:
    env = env.with_jobs(retention_s=3600, max_result_bytes=20).with_app(APP, frozenset())
    enqueuer = enqueuer_of(env)
    job = enqueuer.enqueue("answers", 21)
    value = {"total": 42, "items": [1.5, None, "é"]}
    size = len(json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode())
    env.run_once()
    got = enqueuer.result(job)
    assert got is not None
    assert (got.state, got.value) == ("done", None)
    assert got.error == f"result not kept: {size} bytes of JSON, over jobs.max_result_bytes (20)"


def test_with_done_jobs_deleted_no_result_is_kept_and_the_worker_says_so_once(
    env: JobsEnv, caplog: pytest.LogCaptureFixture
) -> None:
    env = env.with_app(APP, frozenset())  # jobs.retention_s = 0: done jobs are deleted at once
    enqueuer = enqueuer_of(env)
    jobs = [enqueuer.enqueue("answers", n) for n in range(3)]
    with caplog.at_level(logging.WARNING):
        env.run_once()
    assert [enqueuer.result(j) for j in jobs] == [None, None, None]
    told = [r for r in caplog.records if "jobs.retention_s" in r.getMessage()]
    assert len(told) == 1, [r.getMessage() for r in told]
    assert "returned a value" in told[0].getMessage()


def test_jobs_show_prints_the_result(env: JobsEnv) -> None:
    env = env.with_jobs(retention_s=3600).with_app(APP, frozenset())
    job = enqueuer_of(env).enqueue("answers", 5)
    env.run_once()
    console = Console(record=True, width=80)
    assert _show(console, JobAdmin(Database(env.settings.mysql), env.settings.jobs), int(job)) == 0
    shown = console.export_text()
    assert re.search(r'│ result\s+│ \{"total":10,"items":\[1\.5,null,"é"\]\}\s+│', shown), shown
