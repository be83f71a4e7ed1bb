"""What the job integration tests share: JobsEnv (SQL and process helpers over one test's jobs table)
and the payloads the test app's tasks have run."""

from __future__ import annotations

import threading
from typing import Any

import pymysql

from duecast.dispatcher.main import serve as serve_dispatcher
from duecast.shared.api.enqueue import Enqueuer
from duecast.shared.fanout.client import connect_redis
from duecast.shared.settings import Settings
from duecast.shared.states import State
from duecast.shared.storage.db import Database
from duecast.shared.storage.leased.jobs import JobStore
from duecast.shared.storage.leased.members import decode_members
from duecast.worker.main import serve as serve_worker
from tests.integration import jobs_app

APP = "tests.integration.jobs_app"


class JobsEnv:
    def __init__(
        self, settings: Settings, sql: pymysql.cursors.Cursor, tasks: frozenset[str] | None = None
    ) -> None:
        self.settings = settings
        self.sql = sql
        self.table = settings.jobs.table
        self.tasks = jobs_app.handlers.task_names if tasks is None else tasks
        self.enqueuer = Enqueuer(settings, connect_redis(settings.redis), self.tasks)

    def with_jobs(self, **jobs: Any) -> JobsEnv:
        return JobsEnv(
            self.settings.model_copy(update={"jobs": self.settings.jobs.model_copy(update=jobs)}),
            self.sql,
            self.tasks,
        )

    def with_app(self, app: str, tasks: frozenset[str], **worker: Any) -> JobsEnv:
        """The same table, served by another handler app (its tasks enqueued by name)."""
        settings = self.settings.model_copy(
            update={"worker": self.settings.worker.model_copy(update={"app": app, **worker})}
        )
        return JobsEnv(settings, self.sql, tasks)

    def run_once(self) -> None:
        """One dispatch and one worker drain: every due job runs (at most) once."""
        serve_dispatcher(self.settings, threading.Event(), drain=True)
        serve_worker(self.settings, threading.Event(), drain=True)

    def make_due(self) -> None:
        """Time passes: every pending job is due now."""
        self.sql.execute(f"UPDATE `{self.table}` SET run_at = NOW(6) WHERE dc_state = {int(State.IDLE)}")

    def job(self, job_id: int, *columns: str) -> tuple[Any, ...]:
        self.sql.execute(f"SELECT {', '.join(columns)} FROM `{self.table}` WHERE id = %s", (job_id,))
        row = self.sql.fetchone()
        assert row is not None, f"job {job_id} is gone"
        return tuple(row)

    def runs(self, *columns: str) -> list[tuple[Any, ...]]:
        """Every run of the table (shared/queries/job_runs.py), in id order."""
        self.sql.execute(f"SELECT {', '.join(columns)} FROM `{self.settings.jobs.runs_table}` ORDER BY id")
        return [tuple(r) for r in self.sql.fetchall()]

    def run_of(self, job_id: int, *columns: str) -> tuple[Any, ...]:
        """The columns of the one run whose members hold `job_id`."""
        found = [row[1:] for row in self.runs("members", *columns) if job_id in decode_members(row[0])]
        assert len(found) == 1, f"job {job_id} is in {len(found)} runs"
        return found[0]

    def expire_leases(self) -> None:
        """Time passes: every started run's lease has run out."""
        self.sql.execute(
            f"UPDATE `{self.settings.jobs.runs_table}` SET lease_until = NOW(6) - INTERVAL 1 SECOND "
            "WHERE lease_until IS NOT NULL"
        )

    def exists(self, job_id: int) -> bool:
        self.sql.execute(f"SELECT COUNT(*) FROM `{self.table}` WHERE id = %s", (job_id,))
        return bool(self.sql.fetchone()[0])

    def store(self, queue: str = "default") -> JobStore:
        src = self.settings.source(f"jobs.{queue}")
        return JobStore(Database(self.settings.mysql), src, self.settings.jobs, self.settings.mysql)


def payloads() -> list[Any]:
    return [p for p, _ in jobs_app.RUNS]
