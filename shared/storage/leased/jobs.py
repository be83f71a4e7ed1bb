"""A job queue's LeasedStore: the jobs table's statements (shared/queries/jobs.py) scoped to one queue.

What only jobs do: the packed start read, backoff up to max_attempts, pruning of done and dead jobs,
and a status by state.
"""

from __future__ import annotations

import logging
import random
from typing import Any

from duecast.shared.acks import Row
from duecast.shared.policy import dead_after_failure, retry_delay_s
from duecast.shared.queries.jobs import (
    DEAD,
    DISPATCHED,
    DONE,
    IDLE,
    JOB_COLUMNS,
    RUNNING,
    JobSQL,
    render_jobs,
)
from duecast.shared.settings import JobsSettings, MySQLSettings, SourceSettings
from duecast.shared.storage.db import Database
from duecast.shared.storage.leased.scope import Scope
from duecast.shared.storage.leased.store import LeasedStore
from duecast.shared.storage.packed import read_packed
from duecast.shared.storage.schema import check_jobs_table
from duecast.shared.storage.source_store import STATUS_COUNT_CAP, SourceStatus, _scalar, _us
from duecast.shared.storage.units import Cursor, lock_or_skip

log = logging.getLogger("duecast.jobs")


class JobStore(LeasedStore):
    """One queue of the jobs table: it claims, sweeps and counts only that queue's jobs."""

    def __init__(self, db: Database, src: SourceSettings, jobs: JobsSettings, mysql: MySQLSettings) -> None:
        self.jobs = jobs
        self.queue = src.name.split(".", 1)[1]
        self.sql: JobSQL = render_jobs(jobs.table)
        scope = Scope(
            sql=self.sql,
            key="id",
            claim=(self.queue,),
            where=(),
            done=self.sql.finish_done if jobs.retention_s > 0 else self.sql.finish_delete,
            noun="job",
            place=f"queue {self.queue}",
            handler="a job's handler",
            author="task",
            log=log,
        )
        super().__init__(
            db,
            src,
            scope,
            mysql,
            lease_s=jobs.lease_s,
            max_interruptions=jobs.max_interruptions,
        )
        self._rng = random.Random()

    def verify(self) -> None:
        with self.db.transaction() as cur:
            check_jobs_table(cur, self.jobs)

    def _lock(self, cur: Cursor, where: str) -> list[Row]:
        """The jobs still DISPATCHED under their entry's attempt, locked and read as one packed value."""

        def locking() -> list[Any] | None:
            packed = read_packed(cur, self.sql.lock_dispatched_packed.format(fence=where), what="jobs")
            if packed is None:  # cut short: the rows are locked now, read them plainly
                cur.execute(self.sql.lock_dispatched.format(fence=where))
            return packed

        def skip_locked() -> None:
            cur.execute(self.sql.lock_dispatched_skip.format(fence=where))

        packed = lock_or_skip(locking, skip_locked)
        if packed is not None:
            return [dict(zip(JOB_COLUMNS, values, strict=True)) for values in packed]
        names = [d[0] for d in cur.description or ()]
        return [dict(zip(names, values, strict=True)) for values in cur.fetchall()]

    def _retry_in(self, row: Row) -> float | None:
        """Exponential backoff with jitter, until this failure uses up the job's max_attempts."""
        errors = int(row["errors"])
        if dead_after_failure(errors, int(row["max_attempts"])):
            log.error(
                "job %s dead after %d failed attempts",
                row["id"],
                errors + 1,
                extra={"event": "job.dead", "source": self.src.name, "job_id": int(row["id"])},
            )
            return None
        return retry_delay_s(errors + 1, self.jobs.retry_base_s, self.jobs.retry_cap_s, self._rng)

    def _trace(self, cur: Cursor, where: str, outcome: str, error: str | None, state: int) -> None:
        """Jobs keep no trace of past attempts: a job's row holds its last error."""

    def prune(self, limit: int) -> int:
        """Delete done jobs older than retention_s and dead ones older than dead_retention_s."""
        pruned = 0
        queues = ",".join(["%s"] * len(self.jobs.queues))
        for state, keep_s in ((DONE, self.jobs.retention_s), (DEAD, self.jobs.dead_retention_s)):
            if state == DEAD and keep_s == 0:
                continue  # dead jobs kept forever
            with self.db.transaction() as cur:
                cur.execute(
                    self.sql.find_prunable.format(queues=queues),
                    (state, *self.jobs.queues, _us(keep_s), limit),
                )
                ids = [int(r[0]) for r in cur.fetchall()]
                if ids:
                    pruned += int(cur.execute(self.sql.prune.format(ids=self._ids(ids)), (state,)))
        return pruned

    def status(self) -> SourceStatus:
        with self.db.transaction() as cur:
            counts = {}
            for state in (IDLE, DISPATCHED, RUNNING, DONE, DEAD):
                cur.execute(self.sql.count_state, (state, self.queue, STATUS_COUNT_CAP))
                counts[state] = int(_scalar(cur) or 0)
            cur.execute(self.sql.count_due, (self.queue, STATUS_COUNT_CAP))
            due = int(_scalar(cur) or 0)
            cur.execute(self.sql.oldest_due, (self.queue,) * 10)
            row = cur.fetchone()
        age = None if row is None or row[0] is None else float(row[0]) / 1e6
        detail = {
            "pending": counts[IDLE],
            "due": due,
            "scheduled": max(0, counts[IDLE] - due),
            "dispatched": counts[DISPATCHED],
            "running": counts[RUNNING],
            "done": counts[DONE],
            "dead": counts[DEAD],
        }
        return SourceStatus(due, counts[DISPATCHED] + counts[RUNNING], age, unit="jobs", detail=detail)
