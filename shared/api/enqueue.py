"""Enqueueing one-off jobs: each job checked first (job_input.encode), then written by
shared.storage.job_writer (the batched INSERT, a duplicate unique key merged), and the Redis wake-up
that lets the dispatcher start a job now instead of at its next poll.

Jobs can join the caller's own open PyMySQL transaction (transactional outbox): they exist if and
only if the caller's transaction commits. The wake-up is a hint; a lost one costs one poll interval.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any

from ..fanout.client import RedisClient, connect_redis
from ..settings import Settings, load_settings
from ..storage.job_writer import (
    DuplicateJob,
    EnqueueError,
    JobId,
    JobRow,
    JobWriter,
    OnDuplicate,
    Written,
)
from ..storage.units import Connection
from .job_input import MAX_JOBS_PER_CALL, MAX_PAYLOAD_DEPTH, Job, check_count, check_on_duplicate, encode

# Re-exported: callers take Job, EnqueueError and encode from here, as before job_input split off, and
# the write's types from here, as before the write moved into storage.
__all__ = [
    "MAX_JOBS_PER_CALL",
    "MAX_PAYLOAD_DEPTH",
    "DuplicateJob",
    "EnqueueError",
    "Enqueuer",
    "Job",
    "JobId",
    "JobRow",
    "OnDuplicate",
    "Written",
    "encode",
]


class Enqueuer(JobWriter):
    """Checks jobs, writes them to the jobs table and wakes the dispatcher after they commit."""

    def __init__(
        self, settings: Settings, client: RedisClient | None, tasks: Iterable[str] | None = None
    ) -> None:
        super().__init__(settings, client, frozenset(tasks) if tasks is not None else None)

    @classmethod
    def connect(cls, config: str | None = None, tasks: Iterable[str] | None = None) -> Enqueuer:
        """An Enqueuer from the environment / DUECAST_CONFIG (or the TOML file `config`)."""
        return cls.from_settings(load_settings(config), tasks)

    @classmethod
    def from_settings(cls, settings: Settings, tasks: Iterable[str] | None = None) -> Enqueuer:
        """An Enqueuer with its own MySQL connection and Redis client, from built settings."""
        return cls(settings, connect_redis(settings.redis), tasks)

    def enqueue(
        self,
        task: str,
        payload: Any = None,
        *,
        queue: str = "default",
        delay_s: float = 0.0,
        run_at: datetime | None = None,
        priority: int = 0,
        max_attempts: int | None = None,
        unique_key: str | None = None,
        on_duplicate: OnDuplicate = "error",
        conn: Connection | None = None,
    ) -> JobId:
        """Enqueue one job; returns its id. With on_duplicate="keep" and an active job of the same
        task holding `unique_key`, nothing is enqueued and the id is that job's (`.merged` is True).

        With `conn`, joins that open transaction (see enqueue_many).
        """
        check_on_duplicate(on_duplicate)
        job = Job(task, payload, queue, delay_s, run_at, priority, max_attempts, unique_key)
        row = encode(job, self.jobs, self.tasks)
        job_id = _job_id(self.insert_rows([row], on_duplicate, conn, "enqueue"))
        if conn is None:
            self.wake()
        return job_id

    def enqueue_many(
        self,
        jobs: Iterable[Job],
        *,
        on_duplicate: OnDuplicate = "error",
        conn: Connection | None = None,
    ) -> list[JobId]:
        """Enqueue all jobs or none, in one transaction; returns the jobs' ids in the order given, a
        JobId each (`.merged` True for a duplicate kept as the active job holding its key).

        Every job is validated before anything is written; more than MAX_JOBS_PER_CALL (100,000)
        jobs in one call are refused (EnqueueError: split them over several calls). A unique key
        already held by an active job of the same task (or twice in `jobs`) raises DuplicateJob and
        writes nothing, or with
        on_duplicate="keep" leaves the existing job as it is. Without `conn`, duecast commits and
        wakes the dispatcher. With `conn` (the caller's open transaction), nothing is committed
        here: the jobs exist only if the caller commits; call `wake()` after that commit to start
        them at once.
        """
        check_on_duplicate(on_duplicate)
        rows: list[JobRow] = []
        for job in jobs:  # counted as they come: a generator of millions stops at the first too many
            check_count(len(rows) + 1)
            rows.append(encode(job, self.jobs, self.tasks))
        if not rows:
            return []
        _check_unique_within(rows, on_duplicate)
        ids = self.insert_rows_with_ids(rows, on_duplicate, conn, "enqueue_many")
        if conn is None:
            self.wake()
        return ids


def _job_id(written: Written) -> JobId:
    if 0 in written.merged:
        return JobId(written.merged[0], merged=True)
    return JobId(written.last_id)


def _check_unique_within(rows: list[JobRow], on_duplicate: OnDuplicate) -> None:
    """Two jobs of one task and batch with one unique key: an error now (before any write) unless
    `keep`."""
    if on_duplicate == "keep":
        return
    seen: set[tuple[str, str]] = set()
    for r in rows:
        if r.unique_key is not None:
            if (r.task, r.unique_key) in seen:
                raise DuplicateJob(
                    f"unique key {r.unique_key!r} of task {r.task!r} appears twice in one enqueue_many"
                )
            seen.add((r.task, r.unique_key))
