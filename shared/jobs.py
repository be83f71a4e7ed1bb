"""Enqueueing one-off jobs: validation (JSON only, capped size, known tasks), the batched INSERT,
and the Redis wake-up that lets the dispatcher start a job now instead of at its next poll.

Jobs can join the caller's own open PyMySQL transaction (transactional outbox): they exist if and
only if the caller's transaction commits. The wake-up is a hint; a lost one costs one poll interval.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import pymysql
import pymysql.cursors
import redis

from shared.db import Database
from shared.identifiers import quote
from shared.keys import Keys
from shared.queue import connect_redis
from shared.settings import JobsSettings, Settings, load_settings

INSERT_CHUNK = 500  # rows per multi-row INSERT: 500 x 64 KiB stays under the default 64 MiB packet


class EnqueueError(ValueError):
    """A job that cannot be enqueued; nothing was written."""


@dataclass(frozen=True)
class Job:
    task: str
    payload: Any = None
    queue: str = "default"
    delay_s: float = 0.0  # run this long after NOW(6) on the server


@dataclass(frozen=True)
class _Row:
    queue: str
    task: str
    payload: str
    delay_us: int


def encode(job: Job, jobs: JobsSettings, tasks: frozenset[str] | None) -> _Row:
    """Validate one job; raises EnqueueError naming what is wrong."""
    if tasks is not None and job.task not in tasks:
        raise EnqueueError(f"unknown task {job.task!r}; registered: {', '.join(sorted(tasks)) or 'none'}")
    if not job.task or len(job.task) > 191:
        raise EnqueueError("a task name must be 1-191 characters")
    if not job.queue or len(job.queue) > 64:
        raise EnqueueError("a queue name must be 1-64 characters")
    if not math.isfinite(job.delay_s) or job.delay_s < 0:
        raise EnqueueError(f"delay_s must be a finite number >= 0, not {job.delay_s!r}")
    try:
        # allow_nan=False: NaN/Infinity are not JSON. Never pickle: payloads are data, not code.
        text = json.dumps(job.payload, allow_nan=False, ensure_ascii=False, separators=(",", ":"))
    except (TypeError, ValueError) as exc:
        raise EnqueueError(f"payload of {job.task!r} is not JSON-serialisable: {exc}") from exc
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > jobs.max_payload_bytes:
        raise EnqueueError(f"payload of {job.task!r} is {size} bytes; the limit is {jobs.max_payload_bytes}")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise EnqueueError(
            f"payload of {job.task!r} holds a lone surrogate, which utf8mb4 cannot store"
        ) from exc
    return _Row(job.queue, job.task, text, round(job.delay_s * 1_000_000))


class Enqueuer:
    """Writes jobs to the jobs table and wakes the dispatcher after they commit."""

    def __init__(
        self, settings: Settings, client: redis.Redis | None, tasks: Iterable[str] | None = None
    ) -> None:
        self.jobs = settings.jobs
        self.db = Database(settings.mysql)
        self.client = client
        self.keys = Keys(settings.redis.key_prefix)
        self.tasks = frozenset(tasks) if tasks is not None else None
        t = quote(self.jobs.table)
        self._insert = f"INSERT INTO {t} (`queue`, `task`, `payload`, `run_at`) VALUES "
        self._values = "(%s, %s, %s, NOW(6) + INTERVAL %s MICROSECOND)"

    @classmethod
    def connect(cls, config: str | None = None, tasks: Iterable[str] | None = None) -> Enqueuer:
        """An Enqueuer from the environment / DUECAST_CONFIG (or the TOML file `config`)."""
        settings = load_settings(config)
        return cls(settings, connect_redis(settings.redis), tasks)

    def enqueue(
        self,
        task: str,
        payload: Any = None,
        *,
        queue: str = "default",
        delay_s: float = 0.0,
        conn: pymysql.Connection[pymysql.cursors.Cursor] | None = None,
    ) -> int:
        """Enqueue one job; returns its id. With `conn`, joins that open transaction (see enqueue_many)."""
        row = encode(Job(task, payload, queue, delay_s), self.jobs, self.tasks)
        if conn is not None:
            with conn.cursor() as cur:
                return self._write(cur, [row])
        with self.db.transaction() as cur:
            job_id = self._write(cur, [row])
        self.wake()
        return job_id

    def enqueue_many(
        self, jobs: Iterable[Job], *, conn: pymysql.Connection[pymysql.cursors.Cursor] | None = None
    ) -> int:
        """Enqueue all jobs or none, in one transaction; returns how many.

        Every job is validated before anything is written. Without `conn`, duecast commits and wakes
        the dispatcher. With `conn` (the caller's open transaction), nothing is committed here: the
        jobs exist only if the caller commits; call `wake()` after that commit to start them at once.
        """
        rows = [encode(job, self.jobs, self.tasks) for job in jobs]
        if not rows:
            return 0
        if conn is not None:
            with conn.cursor() as cur:
                self._write(cur, rows)
            return len(rows)
        with self.db.transaction() as cur:
            self._write(cur, rows)
        self.wake()
        return len(rows)

    @contextmanager
    def transaction(self, conn: pymysql.Connection[pymysql.cursors.Cursor]) -> Iterator[None]:
        """`with enqueuer.transaction(conn): ...enqueue_many(..., conn=conn)...`: commits the caller's
        connection on success (rolls back on error), then wakes the dispatcher."""
        try:
            yield
            conn.commit()
        except BaseException:
            conn.rollback()
            raise
        self.wake()

    def wake(self) -> None:
        """Tell a dispatcher that jobs are due now. Best effort: the dispatcher polls anyway."""
        if self.client is None:
            return
        try:
            pipe = self.client.pipeline(transaction=False)
            pipe.lpush(self.keys.wake(), b"1")
            pipe.ltrim(self.keys.wake(), 0, 0)  # one pending wake-up is as good as many
            pipe.execute()
        except redis.RedisError:
            pass  # a lost wake-up costs one poll interval, never a job

    def _write(self, cur: pymysql.cursors.Cursor, rows: list[_Row]) -> int:
        """Multi-row INSERTs of INSERT_CHUNK rows; returns the id of the last statement's first row."""
        for i in range(0, len(rows), INSERT_CHUNK):
            chunk = rows[i : i + INSERT_CHUNK]
            params: list[Any] = []
            for r in chunk:
                params.extend((r.queue, r.task, r.payload, r.delay_us))
            cur.execute(self._insert + ",".join([self._values] * len(chunk)), params)
        return int(cur.lastrowid or 0)
