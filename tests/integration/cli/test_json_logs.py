"""`log_format = "json"` in real processes: every stderr line is one JSON object with an event name,
and a failed job's lines carry its id, its task and the worker process (host:pid) that ran it."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pymysql
import pytest

from duecast.shared.api.enqueue import Enqueuer
from duecast.shared.settings import MySQLSettings, RedisSettings
from tests.integration.cli.jobs_cli_env import JobsEnv, jobs_cli_env, run_duecast

pytestmark = pytest.mark.integration



@pytest.fixture
def jobs_env(
    mysql_settings: MySQLSettings, redis_settings: RedisSettings, sql: pymysql.cursors.Cursor
) -> Iterator[JobsEnv]:
    with jobs_cli_env(mysql_settings, redis_settings, sql, "json") as env:
        yield env


def run(env: dict[str, str], *args: str) -> list[dict[str, Any]]:
    lines = [line for line in run_duecast(env, *args).splitlines() if line.strip()]
    assert lines, "the process logged nothing"
    return [json.loads(line) for line in lines]  # every line is one JSON object


def test_a_failed_job_is_logged_as_json_events_with_its_id_and_worker(
    jobs_env: tuple[dict[str, str], Enqueuer, str], sql: pymysql.cursors.Cursor
) -> None:
    env, enqueuer, table = jobs_env
    job_id = enqueuer.enqueue("fail_always", "json-log", max_attempts=1)

    dispatcher = run(env, "dispatcher", "--drain")
    worker = run(env, "worker", "--drain", "--app", "tests.integration.jobs_app")

    for doc in dispatcher + worker:
        assert {"ts", "level", "logger", "event", "message", "process"} <= set(doc)
    failed = next(d for d in worker if d["event"] == "worker.handler_failed")
    assert (failed["job_id"], failed["task"], failed["source"]) == (job_id, "fail_always", "jobs.default")
    assert "RuntimeError: boom json-log" in failed["exception"]
    dead = next(d for d in worker if d["event"] == "job.dead")
    assert dead["job_id"] == job_id
    sql.execute(f"SELECT worker FROM `{table}` WHERE id = %s", (job_id,))
    assert sql.fetchone() == (failed["process"],)  # the job names the process whose lines these are
    assert {d["event"] for d in dispatcher} >= {"dispatcher.dispatching"}
