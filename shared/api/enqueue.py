"""Enqueueing one-off jobs: each job checked first (job_input.encode), then written by
shared.storage.job_writer (the batched INSERT, a duplicate unique key merged), and the Redis wake-up
that lets the dispatcher start a job now instead of at its next poll.

Jobs can join the caller's own open transaction (transactional outbox, `conn=`: a PyMySQL or mysqlclient
connection or cursor, a SQLAlchemy Connection or Session, a Django connection): they exist if and only if
it commits. The wake-up is a hint; a lost one costs one poll interval. `aenqueue*` run the same write on
the Enqueuer's threads, so an event loop never waits for MySQL.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from functools import partial
from typing import Any

from ..fanout.client import RedisClient, connect_redis
from ..settings import Settings, load_settings
from ..storage.job_cancels import cancel_jobs
from ..storage.job_results import JobResult, read_result
from ..storage.job_writer import (
    DuplicateJob,
    EnqueueError,
    JobId,
    JobRow,
    JobWriter,
    OnDuplicate,
    Written,
)
from ..storage.units import StorageError, access_denied
from .job_input import MAX_JOBS_PER_CALL, MAX_PAYLOAD_DEPTH, Job, check_count, check_on_duplicate, encode
from .middleware import Middleware, through_enqueue

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
    "JobResult",
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
        self.middleware: list[Middleware] = []

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
        conn: object | None = None,
        concurrency_key: str | None = None,
    ) -> JobId:
        """Enqueue one job; returns its id. With on_duplicate="keep" and an active job of the same
        task holding `unique_key`, nothing is enqueued and the id is that job's (`.merged` is True).
        `concurrency_key` (an account, a tenant): see `[jobs.key_limits]` (docs/protecting.md).

        With `conn`, joins that open transaction (see enqueue_many).
        """
        check_on_duplicate(on_duplicate)
        job = Job(
            task,
            payload,
            queue,
            delay_s,
            run_at,
            priority,
            max_attempts,
            unique_key,
            concurrency_key=concurrency_key,
        )
        return self._enqueue(self._through(job), on_duplicate, conn)

    def _enqueue(self, job: Job, on_duplicate: OnDuplicate, conn: object | None) -> JobId:
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
        conn: object | None = None,
    ) -> list[JobId]:
        """Enqueue all jobs or none, in one transaction; returns the jobs' ids in the order given, a
        JobId each (`.merged` True for a duplicate kept as the active job holding its key).

        Every job is validated before anything is written; more than MAX_JOBS_PER_CALL (100,000)
        jobs in one call are refused (EnqueueError: split them over several calls). A unique key
        already held by an active job of the same task (or twice in `jobs`) raises DuplicateJob and
        writes nothing, or with
        on_duplicate="keep" leaves the existing job as it is. Without `conn`, duecast commits and
        wakes the dispatcher. With `conn` (the caller's open transaction: a PyMySQL or mysqlclient
        connection or cursor, a SQLAlchemy Connection or Session, a Django connection), nothing is
        committed or rolled back here: the jobs exist only if the caller commits. Django's
        on_commit and SQLAlchemy's commit events wake the dispatcher; through a plain driver
        connection, call `wake()` after your commit, or the dispatcher's poll finds them within
        dispatcher.poll_interval_s. A connection in autocommit mode (Django outside `atomic()`)
        holds no transaction: the jobs are written in one of duecast's own on it, committed here.
        """
        return self._enqueue_many((self._through(job) for job in jobs), on_duplicate, conn)

    def _enqueue_many(
        self, jobs: Iterable[Job], on_duplicate: OnDuplicate, conn: object | None
    ) -> list[JobId]:
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

    async def aenqueue(
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
        concurrency_key: str | None = None,
    ) -> JobId:
        """`enqueue` for asyncio code, in a transaction of duecast's own: the write runs on one of the
        Enqueuer's threads (one connection each), so the event loop never waits for MySQL, even while
        it is down, and any number of tasks may await at once."""
        job = self._through(
            Job(
                task,
                payload,
                queue,
                delay_s,
                run_at,
                priority,
                max_attempts,
                unique_key,
                concurrency_key=concurrency_key,
            )
        )
        return await self.off_loop(partial(self._enqueue, job, on_duplicate, None))

    async def aenqueue_many(self, jobs: Iterable[Job], *, on_duplicate: OnDuplicate = "error") -> list[JobId]:
        """`enqueue_many` for asyncio code (see aenqueue)."""
        prepared = [self._through(job) for job in jobs]  # here: middleware sees the caller's context
        return await self.off_loop(partial(self._enqueue_many, prepared, on_duplicate, None))

    def use(self, middleware: Middleware) -> Middleware:
        """Add enqueue middleware (Middleware.enqueue), run in the caller on every job before it is
        checked; the first added runs first. Returns it."""
        if not isinstance(middleware, Middleware):
            raise TypeError(f"Enqueuer.use takes a duecast Middleware, not {type(middleware).__name__}")
        self.middleware.append(middleware)
        return middleware

    def _through(self, job: Job) -> Job:
        return through_enqueue(self.middleware, job) if self.middleware else job

    def result(self, job_id: int) -> JobResult | None:
        """The job's outcome (JobResult: state, the task's return value once done, its last error),
        or None when there is no such job: never enqueued, or pruned. A done job's value is kept only
        while done jobs are (jobs.retention_s > 0; docs/jobs.md, "Results")."""
        return read_result(self.db, self.sql, int(job_id))

    async def aresult(self, job_id: int) -> JobResult | None:
        """result() for asyncio code: the read runs on the writer's own threads, never on the loop."""
        return await self.off_loop(lambda: self.result(job_id))

    def cancel(self, ids: int | Iterable[int]) -> int:
        """Cancel jobs by id; returns how many were cancelled. A pending or scheduled job is cancelled
        at once (final: result() reads "cancelled"); one in flight too, and its worker cancels an
        `async def` task within about jobs.lease_s/3, while a plain one can see it in
        `current_job().cancelled`; whatever it returns or raises then is stale, and it is never
        retried. Done, dead, cancelled or unknown jobs are left alone (docs/jobs.md, "Cancel")."""
        wanted = [ids] if isinstance(ids, int) else list(ids)
        if not all(isinstance(i, int) and not isinstance(i, bool) for i in wanted):
            raise EnqueueError("cancel takes job ids (ints)")
        if not wanted:
            return 0
        try:
            return cancel_jobs(self.db, self.sql, wanted)
        except StorageError as exc:
            if not access_denied(exc):
                raise
            raise EnqueueError(
                f"cancelling jobs needs UPDATE on {self.jobs.table}, which this MySQL account lacks "
                "(an enqueuer's grants are INSERT only: sql/grants.sql); cancel with the dispatcher's "
                "or an operator's account"
            ) from None

    async def acancel(self, ids: int | Iterable[int]) -> int:
        """cancel() for asyncio code: the write runs on the writer's own threads, never on the loop."""
        return await self.off_loop(lambda: self.cancel(ids))


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
