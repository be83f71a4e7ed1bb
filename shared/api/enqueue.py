"""Enqueueing one-off jobs: validation (JSON only, capped size, known tasks), the batched INSERT,
and the Redis wake-up that lets the dispatcher start a job now instead of at its next poll.

Jobs can join the caller's own open PyMySQL transaction (transactional outbox): they exist if and
only if the caller's transaction commits. The wake-up is a hint; a lost one costs one poll interval.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

import pymysql
import pymysql.cursors
import redis

from duecast.shared.fanout.keys import Keys
from duecast.shared.fanout.queue import connect_redis
from duecast.shared.queries.jobs import render_jobs
from duecast.shared.settings import JobsSettings, Settings, load_settings
from duecast.shared.storage.db import Database
from duecast.shared.storage.outbox import Outbox

INSERT_CHUNK = 500  # rows per multi-row INSERT: 500 x 64 KiB stays under the default 64 MiB packet
DUPLICATE_KEY = 1062  # ER_DUP_ENTRY
OnDuplicate = Literal["error", "keep"]


class EnqueueError(ValueError):
    """A job that cannot be enqueued; nothing was written."""


class DuplicateJob(EnqueueError):
    """A unique job whose key an active (pending or running) job already holds; nothing was written."""


@dataclass(frozen=True)
class Job:
    """One job to enqueue. Times: `delay_s` after the database's NOW(6), or `run_at` (aware)."""

    task: str
    payload: Any = None
    queue: str = "default"
    delay_s: float = 0.0
    run_at: datetime | None = None
    priority: int = 0  # 0-9, 0 runs first
    max_attempts: int | None = None  # None: jobs.max_attempts
    unique_key: str | None = None  # at most one pending or running job per key


@dataclass(frozen=True)
class _Row:
    queue: str
    task: str
    payload: str
    priority: int
    max_attempts: int
    unique_key: str | None
    run_at_utc: datetime | None
    delay_us: int
    schedule: str | None = None
    scheduled_for: datetime | None = None

    def params(self) -> tuple[Any, ...]:
        return (
            self.queue,
            self.task,
            self.payload,
            self.priority,
            self.max_attempts,
            self.unique_key,
            self.unique_key,  # unique_slot: the key, held while the job is active
            self.schedule,
            self.scheduled_for,
            self.run_at_utc,
            self.delay_us,
        )


def encode(job: Job, jobs: JobsSettings, tasks: frozenset[str] | None) -> _Row:
    """Validate one job; raises EnqueueError naming what is wrong."""
    if tasks is not None and job.task not in tasks:
        raise EnqueueError(f"unknown task {job.task!r}; registered: {', '.join(sorted(tasks)) or 'none'}")
    if not job.task or len(job.task) > 191:
        raise EnqueueError("a task name must be 1-191 characters")
    if job.queue not in jobs.queues:
        raise EnqueueError(f"unknown queue {job.queue!r}; jobs.queues is {', '.join(jobs.queues)}")
    if not math.isfinite(job.delay_s) or job.delay_s < 0:
        raise EnqueueError(f"delay_s must be a finite number >= 0, not {job.delay_s!r}")
    if type(job.priority) is not int or not 0 <= job.priority <= 9:
        raise EnqueueError(f"priority must be an int 0-9 (0 runs first), not {job.priority!r}")
    attempts = jobs.max_attempts if job.max_attempts is None else job.max_attempts
    if type(attempts) is not int or not 1 <= attempts <= 10_000:
        raise EnqueueError(f"max_attempts must be an int 1-10000, not {attempts!r}")
    if job.unique_key is not None and not 1 <= len(job.unique_key) <= 191:
        raise EnqueueError("a unique_key must be 1-191 characters")
    return _Row(
        job.queue,
        job.task,
        _payload_text(job, jobs.max_payload_bytes),
        job.priority,
        attempts,
        job.unique_key,
        _utc(job.run_at),
        round(job.delay_s * 1_000_000),
    )


def _payload_text(job: Job, limit: int) -> str:
    try:
        # allow_nan=False: NaN/Infinity are not JSON. Never pickle: payloads are data, not code.
        text = json.dumps(job.payload, allow_nan=False, ensure_ascii=False, separators=(",", ":"))
    except (TypeError, ValueError, RecursionError) as exc:
        raise EnqueueError(f"payload of {job.task!r} is not JSON-serialisable: {exc}") from exc
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > limit:
        raise EnqueueError(f"payload of {job.task!r} is {size} bytes; the limit is {limit}")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise EnqueueError(
            f"payload of {job.task!r} holds a lone surrogate, which utf8mb4 cannot store"
        ) from exc
    return text


def _utc(at: datetime | None) -> datetime | None:
    if at is None:
        return None
    if at.tzinfo is None or at.utcoffset() is None:
        raise EnqueueError("run_at must be a timezone-aware datetime")
    return at.astimezone(UTC).replace(tzinfo=None)


class Enqueuer(Outbox):
    """Writes jobs to the jobs table and wakes the dispatcher after they commit."""

    def __init__(
        self, settings: Settings, client: redis.Redis | None, tasks: Iterable[str] | None = None
    ) -> None:
        self.jobs = settings.jobs
        self.db = Database(settings.mysql)
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
        conn: pymysql.Connection[pymysql.cursors.Cursor] | None = None,
    ) -> int:
        """Enqueue one job; returns its id (with on_duplicate="keep", the existing job's id).

        With `conn`, joins that open transaction (see enqueue_many).
        """
        job = Job(task, payload, queue, delay_s, run_at, priority, max_attempts, unique_key)
        row = encode(job, self.jobs, self.tasks)
        if conn is not None:
            with conn.cursor() as cur:
                return self.write(cur, [row], on_duplicate)
        with self.db.transaction() as cur:
            job_id = self.write(cur, [row], on_duplicate)
        self.wake()
        return job_id

    def enqueue_many(
        self,
        jobs: Iterable[Job],
        *,
        on_duplicate: OnDuplicate = "error",
        conn: pymysql.Connection[pymysql.cursors.Cursor] | None = None,
    ) -> list[int]:
        """Enqueue all jobs or none, in one transaction; returns the jobs' ids, in the order given
        (with on_duplicate="keep", a duplicate's is the existing job's id).

        Every job is validated before anything is written. A unique key already held by an active
        job (or twice in `jobs`) raises DuplicateJob and writes nothing, or with on_duplicate="keep"
        leaves the existing job as it is. Without `conn`, duecast commits and wakes the dispatcher.
        With `conn` (the caller's open transaction), nothing is committed here: the jobs exist only
        if the caller commits; call `wake()` after that commit to start them at once.
        """
        rows = [encode(job, self.jobs, self.tasks) for job in jobs]
        if not rows:
            return []
        _check_unique_within(rows, on_duplicate)
        if conn is not None:
            with conn.cursor() as cur:
                return self.write_ids(cur, rows, on_duplicate)
        with self.db.transaction() as cur:
            ids = self.write_ids(cur, rows, on_duplicate)
        self.wake()
        return ids

    def write(self, cur: pymysql.cursors.Cursor, rows: Sequence[_Row], on_duplicate: OnDuplicate) -> int:
        """Multi-row INSERTs of INSERT_CHUNK rows on `cur` (no commit); returns the id of the last
        statement's first row. A duplicate unique key raises DuplicateJob unless `keep`."""
        tail = self.sql.on_duplicate_keep if on_duplicate == "keep" else ""
        for i in range(0, len(rows), INSERT_CHUNK):
            self._insert(cur, rows[i : i + INSERT_CHUNK], tail)
        return int(cur.lastrowid or 0)

    def write_ids(
        self, cur: pymysql.cursors.Cursor, rows: Sequence[_Row], on_duplicate: OnDuplicate
    ) -> list[int]:
        """As write(), returning every row's job id in order: from RETURNING where the server has
        it (MariaDB), else consecutive from LAST_INSERT_ID() where the auto-increment lock mode
        guarantees it, else one INSERT per row (exact, slower)."""
        keep = on_duplicate == "keep"
        tail = self.sql.on_duplicate_keep if keep else ""
        how = self._ids_by(cur)
        ids: list[int] = []
        for i in range(0, len(rows), INSERT_CHUNK):
            chunk = rows[i : i + INSERT_CHUNK]
            if how == "returning":
                self._insert(cur, chunk, tail + self.sql.returning_ids)
                ids.extend(int(r[0]) for r in cur.fetchall())
            elif how == "consecutive" and not keep:
                self._insert(cur, chunk, tail)
                first = int(cur.lastrowid or 0)
                ids.extend(range(first, first + len(chunk)))
            else:
                for row in chunk:
                    self._insert(cur, [row], tail)
                    ids.append(int(cur.lastrowid or 0))
        return ids

    def _ids_by(self, cur: pymysql.cursors.Cursor) -> str:
        if self._ids_how is None:
            cur.execute(self.sql.id_facts)
            version, lock_mode = cur.fetchone() or ("", 2)
            if "mariadb" in str(version).lower() and _version(str(version)) >= (10, 5):
                self._ids_how = "returning"
            else:
                self._ids_how = "consecutive" if int(lock_mode) <= 1 else "one_by_one"
        return self._ids_how

    def _insert(self, cur: pymysql.cursors.Cursor, chunk: Sequence[_Row], tail: str) -> None:
        params = [p for r in chunk for p in r.params()]
        try:
            cur.execute(self.sql.insert + ",".join([self.sql.insert_values] * len(chunk)) + tail, params)
        except pymysql.err.IntegrityError as exc:
            if exc.args[0] != DUPLICATE_KEY:
                raise
            raise DuplicateJob(
                f"a pending or running job already holds this unique key ({exc.args[1]})"
            ) from exc


def _version(text: str) -> tuple[int, int]:
    """(major, minor) of a VERSION() string such as `10.11.19-MariaDB-0+deb12u1`."""
    parts = text.split("-", 1)[0].split(".")
    try:
        return int(parts[0]), int(parts[1])
    except (IndexError, ValueError):
        return 0, 0


def _check_unique_within(rows: list[_Row], on_duplicate: OnDuplicate) -> None:
    """Two jobs of one batch with one unique key: an error now (before any write) unless `keep`."""
    if on_duplicate == "keep":
        return
    seen: set[str] = set()
    for r in rows:
        if r.unique_key is not None:
            if r.unique_key in seen:
                raise DuplicateJob(f"unique key {r.unique_key!r} appears twice in one enqueue_many")
            seen.add(r.unique_key)
