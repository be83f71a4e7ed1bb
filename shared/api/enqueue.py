"""Enqueueing one-off jobs: the batched INSERT (checked first by job_input.encode), merging a
duplicate unique key, and the Redis wake-up that lets the dispatcher start a job now instead of at
its next poll.

Jobs can join the caller's own open PyMySQL transaction (transactional outbox): they exist if and
only if the caller's transaction commits. The wake-up is a hint; a lost one costs one poll interval.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

import redis

from ..fanout.keys import Keys
from ..fanout.queue import connect_redis
from ..queries.jobs import render_jobs
from ..settings import Settings, load_settings
from ..storage.db import Database
from ..storage.outbox import Outbox
from ..storage.units import Connection, Cursor, DuplicateKey, StorageError, access_denied, translated
from .job_input import MAX_PAYLOAD_DEPTH, EnqueueError, Job, JobRow, encode

INSERT_CHUNK = 500  # rows per multi-row INSERT: 500 x 64 KiB stays under the default 64 MiB packet
MERGE_TRIES = 3  # a duplicate whose holder finished before we could read it: insert again
OnDuplicate = Literal["error", "keep"]
# Re-exported: callers take Job, EnqueueError and encode from here, as before job_input split off.
__all__ = [
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


class DuplicateJob(EnqueueError):
    """A unique job whose key an active (pending or running) job of its task already holds; nothing
    was written."""


class JobId(int):
    """What `enqueue` returns: the job's id. `merged` is True when on_duplicate="keep" found an
    active job of the same task holding the unique key: the id is that job's, and nothing was
    enqueued."""

    merged: bool

    def __new__(cls, value: int, merged: bool = False) -> JobId:
        self = super().__new__(cls, value)
        self.merged = merged
        return self


@dataclass(frozen=True)
class Written:
    """What one `Enqueuer.write` did."""

    last_id: int  # the id of the last INSERT's first row: a one-row write's job, unless merged
    merged: dict[int, int]  # on_duplicate="keep": index in the rows given -> the active job kept


class Enqueuer(Outbox):
    """Writes jobs to the jobs table and wakes the dispatcher after they commit."""

    def __init__(
        self, settings: Settings, client: redis.Redis | None, tasks: Iterable[str] | None = None
    ) -> None:
        self.jobs = settings.jobs
        self.db = Database(settings.mysql)
        self.retry_s = settings.mysql.writer_retry_s
        self.client = client
        self.keys = Keys(settings.redis.key_prefix)
        self.tasks = frozenset(tasks) if tasks is not None else None
        self.sql = render_jobs(self.jobs.table)
        self._ids_how: str | None = None  # how write_ids learns the new ids on this server

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
        job = Job(task, payload, queue, delay_s, run_at, priority, max_attempts, unique_key)
        row = encode(job, self.jobs, self.tasks)
        if conn is not None:
            with conn.cursor() as cur:
                return _job_id(self.write(cur, [row], on_duplicate))
        job_id = _job_id(self.on_own_connection(lambda cur: self.write(cur, [row], on_duplicate), "enqueue"))
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

        Every job is validated before anything is written. A unique key already held by an active
        job of the same task (or twice in `jobs`) raises DuplicateJob and writes nothing, or with
        on_duplicate="keep" leaves the existing job as it is. Without `conn`, duecast commits and
        wakes the dispatcher. With `conn` (the caller's open transaction), nothing is committed
        here: the jobs exist only if the caller commits; call `wake()` after that commit to start
        them at once.
        """
        rows = [encode(job, self.jobs, self.tasks) for job in jobs]
        if not rows:
            return []
        _check_unique_within(rows, on_duplicate)
        if conn is not None:
            with conn.cursor() as cur:
                return self.write_ids(cur, rows, on_duplicate)
        ids = self.on_own_connection(lambda cur: self.write_ids(cur, rows, on_duplicate), "enqueue_many")
        self.wake()
        return ids

    def write(self, cur: Cursor, rows: Sequence[JobRow], on_duplicate: OnDuplicate) -> Written:
        """Multi-row INSERTs of INSERT_CHUNK rows on `cur` (no commit). A duplicate unique key raises
        DuplicateJob; with `keep`, the chunk is written again row by row and each duplicate is
        merged into the active job holding its key (plain INSERTs and a read: no UPDATE needed)."""
        merged: dict[int, int] = {}
        last_id = 0
        for i in range(0, len(rows), INSERT_CHUNK):
            chunk = rows[i : i + INSERT_CHUNK]
            try:
                last_id = self._insert(cur, chunk)
                continue
            except DuplicateKey as exc:
                if on_duplicate != "keep":
                    raise _duplicate(exc) from exc
            # InnoDB undid the whole statement: one row at a time now.
            for j, row in enumerate(chunk):
                holder = self._insert_or_find(cur, row)
                if holder is None:
                    last_id = int(cur.lastrowid or 0) if j == 0 else last_id
                else:
                    merged[i + j] = holder
        return Written(last_id, merged)

    def write_ids(self, cur: Cursor, rows: Sequence[JobRow], on_duplicate: OnDuplicate) -> list[JobId]:
        """As write(), with every row's id in order: consecutive from LAST_INSERT_ID() where the
        auto-increment lock mode guarantees it (0 or 1: MariaDB's default), else one INSERT per row
        (exact, slower; MySQL 8's default, 2, may interleave another session's ids). Not RETURNING:
        MariaDB wants INSERT on `id` for it, which the enqueuer account does not hold."""
        keep = on_duplicate == "keep"
        how = self._ids_by(cur)
        ids: list[JobId] = []
        for i in range(0, len(rows), INSERT_CHUNK):
            chunk = rows[i : i + INSERT_CHUNK]
            if how == "consecutive":
                try:
                    first = self._insert(cur, chunk)
                    ids.extend(JobId(n) for n in range(first, first + len(chunk)))
                    continue
                except DuplicateKey as exc:
                    if not keep:
                        raise _duplicate(exc) from exc
            # One row at a time (InnoDB undid the whole statement, if there was one).
            ids.extend(self._insert_one_by_one(cur, chunk, keep))
        return ids

    def _insert_one_by_one(self, cur: Cursor, chunk: Sequence[JobRow], keep: bool) -> list[JobId]:
        ids: list[JobId] = []
        for row in chunk:
            if keep:
                holder = self._insert_or_find(cur, row)
                ids.append(JobId(int(cur.lastrowid or 0)) if holder is None else JobId(holder, merged=True))
                continue
            try:
                ids.append(JobId(self._insert(cur, [row])))
            except DuplicateKey as exc:
                raise _duplicate(exc) from exc
        return ids

    def _ids_by(self, cur: Cursor) -> str:
        if self._ids_how is None:
            with translated():
                cur.execute(self.sql.id_facts)
                found = cur.fetchone()
            self._ids_how = "consecutive" if found is not None and int(found[0]) <= 1 else "one_by_one"
        return self._ids_how

    def _insert(self, cur: Cursor, rows: Sequence[JobRow]) -> int:
        scheduled = any(r.schedule is not None for r in rows)
        head, values = (
            (self.sql.insert_scheduled, self.sql.insert_scheduled_values)
            if scheduled
            else (self.sql.insert, self.sql.insert_values)
        )
        params = [p for r in rows for p in r.params(scheduled)]
        with translated():
            cur.execute(head + ",".join([values] * len(rows)), params)
        return int(cur.lastrowid or 0)

    def _insert_or_find(self, cur: Cursor, row: JobRow) -> int | None:
        """Insert one row: None, or on a duplicate the id of the active job holding its key."""
        for _ in range(MERGE_TRIES):
            try:
                self._insert(cur, [row])
                return None
            except DuplicateKey:
                pass
            holder = self._holder(cur, row)
            if holder is not None:
                return holder
        raise DuplicateJob(f"unique key {row.unique_key!r} changed hands {MERGE_TRIES} times; try again")

    def _holder(self, cur: Cursor, row: JobRow) -> int | None:
        if row.unique_key is not None:
            try:
                with translated():
                    cur.execute(self.sql.find_unique_holder, (row.task, row.unique_key))
            except StorageError as exc:
                if not access_denied(exc):
                    raise
                with translated():  # no SELECT granted: the DBA's function reads it (sql/grants.sql)
                    cur.execute(self.sql.call_unique_holder, (row.task, row.unique_key))
            found = cur.fetchone()
            if found is not None and found[0] is not None:
                return int(found[0])
        if row.schedule is not None:
            with translated():
                cur.execute(self.sql.find_scheduled_holder, (row.schedule, row.scheduled_for))
            found = cur.fetchone()
            if found is not None:
                return int(found[0])
        return None


def _duplicate(exc: DuplicateKey) -> DuplicateJob:
    return DuplicateJob(f"a pending or running job of the same task already holds this unique key {exc}")


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
