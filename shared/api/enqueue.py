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
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

import redis

from duecast.shared.fanout.keys import Keys
from duecast.shared.fanout.queue import connect_redis
from duecast.shared.queries.jobs import render_jobs
from duecast.shared.settings import JobsSettings, Settings, load_settings
from duecast.shared.storage.db import Database
from duecast.shared.storage.outbox import Outbox
from duecast.shared.storage.units import Connection, Cursor, DuplicateKey, translated

INSERT_CHUNK = 500  # rows per multi-row INSERT: 500 x 64 KiB stays under the default 64 MiB packet
TEXT_CHARS = 191  # task and unique_key: VARCHAR(191), the most utf8mb4 an index prefix took in 5.6
SHOWN_CHARS = 60  # of a bad value, in an error message
MAX_PAYLOAD_DEPTH = 100  # nesting of lists and objects: MySQL's own JSON limit
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
MERGE_TRIES = 3  # a duplicate whose holder finished before we could read it: insert again
OnDuplicate = Literal["error", "keep"]


class EnqueueError(ValueError):
    """A job that cannot be enqueued; nothing was written."""


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
class Job:
    """One job to enqueue. Times: `delay_s` after the database's NOW(6), or `run_at` (aware)."""

    task: str
    payload: Any = None
    queue: str = "default"
    delay_s: float = 0.0
    run_at: datetime | None = None
    priority: int = 0  # 0-9, 0 runs first
    max_attempts: int | None = None  # None: jobs.max_attempts
    unique_key: str | None = None  # at most one pending or running job of this task per key


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

    def params(self, scheduled: bool = False) -> tuple[Any, ...]:
        """The values of one row; `scheduled`: of a statement with the schedule columns."""
        values = (
            self.queue,
            self.task,
            self.payload,
            self.priority,
            self.max_attempts,
            self.unique_key,
            self.unique_key,  # unique_slot: the key, held while the job is active
            self.run_at_utc,
            self.delay_us,
        )
        return (*values, self.schedule, self.scheduled_for) if scheduled else values


@dataclass(frozen=True)
class Written:
    """What one `Enqueuer.write` did."""

    last_id: int  # the id of the last INSERT's first row: a one-row write's job, unless merged
    merged: dict[int, int]  # on_duplicate="keep": index in the rows given -> the active job kept


def encode(job: Job, jobs: JobsSettings, tasks: frozenset[str] | None) -> _Row:
    """Validate one job; raises EnqueueError naming the field and what is wrong. Every value is
    checked for its type too: a JSON Lines file or a caller may pass anything."""
    _check_text("task", job.task)
    if tasks is not None and job.task not in tasks:
        raise EnqueueError(f"unknown task {job.task!r}; registered: {', '.join(sorted(tasks)) or 'none'}")
    if not isinstance(job.queue, str) or job.queue not in jobs.queues:
        raise EnqueueError(f"unknown queue {_shown(job.queue)}; jobs.queues is {', '.join(jobs.queues)}")
    delay_us = _delay_us(job.delay_s, jobs.max_delay_s)
    if type(job.priority) is not int or not 0 <= job.priority <= 9:
        raise EnqueueError(f"priority must be an int 0-9 (0 runs first), not {_shown(job.priority)}")
    attempts = jobs.max_attempts if job.max_attempts is None else job.max_attempts
    if type(attempts) is not int or not 1 <= attempts <= 10_000:
        raise EnqueueError(f"max_attempts must be an int 1-10000, not {_shown(attempts)}")
    if job.unique_key is not None:
        _check_text("unique_key", job.unique_key)
    return _Row(
        job.queue,
        job.task,
        _payload_text(job, jobs.max_payload_bytes),
        job.priority,
        attempts,
        job.unique_key,
        _utc(job.run_at, jobs.max_delay_s),
        delay_us,
    )


def _shown(value: object) -> str:
    """A bad value in an error message: its repr, cut short (it may be huge, or hostile)."""
    text = repr(value)
    return text if len(text) <= SHOWN_CHARS else text[: SHOWN_CHARS - 3] + "..."


def _check_text(field: str, value: object) -> None:
    """task and unique_key: VARCHAR(191) utf8mb4 columns."""
    if not isinstance(value, str) or not 1 <= len(value) <= TEXT_CHARS:
        raise EnqueueError(f"{field} must be a string of 1-{TEXT_CHARS} characters, not {_shown(value)}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise EnqueueError(
            f"{field} {_shown(value)} holds a lone surrogate, which utf8mb4 cannot store"
        ) from exc


def _delay_us(delay_s: object, max_delay_s: float) -> int:
    if isinstance(delay_s, bool) or not isinstance(delay_s, int | float):
        raise EnqueueError(f"delay_s must be a number of seconds, not {_shown(delay_s)}")
    if isinstance(delay_s, float) and not math.isfinite(delay_s):
        raise EnqueueError(f"delay_s must be a finite number of seconds, not {delay_s!r}")
    if not 0 <= delay_s <= max_delay_s:
        raise EnqueueError(f"delay_s must be 0-{max_delay_s:.0f} s (jobs.max_delay_s), not {_shown(delay_s)}")
    return round(delay_s * 1_000_000)


def _payload_text(job: Job, limit: int) -> str:
    if not _depth_within(job.payload, MAX_PAYLOAD_DEPTH):
        raise EnqueueError(f"payload of {job.task!r} is nested deeper than {MAX_PAYLOAD_DEPTH} levels")
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


def _depth_within(value: Any, limit: int) -> bool:
    """Whether lists and dicts nest at most `limit` deep; a loop, not recursion, so a hostile
    payload cannot exhaust the stack (a cycle nests without end: refused)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Iterable[Any] = item.values()
        elif isinstance(item, list | tuple):
            children = item
        else:
            continue
        if depth > limit:
            return False
        stack.extend((child, depth + 1) for child in children)
    return True


def _utc(at: object, max_delay_s: float) -> datetime | None:
    """run_at as a naive UTC datetime, between 1970 and jobs.max_delay_s ahead. The app clock only
    bounds it (due-ness is still decided by NOW(6)): a clock off by minutes moves no job."""
    if at is None:
        return None
    if not isinstance(at, datetime) or at.tzinfo is None or at.utcoffset() is None:
        raise EnqueueError(f"run_at must be a timezone-aware datetime, not {_shown(at)}")
    try:
        utc = at.astimezone(UTC)
    except OverflowError as exc:
        raise EnqueueError(f"run_at {at.isoformat()} is out of range") from exc
    latest = datetime.now(UTC) + timedelta(seconds=max_delay_s)
    if not EPOCH <= utc <= latest:
        raise EnqueueError(
            f"run_at must be between 1970 and {max_delay_s:.0f} s (jobs.max_delay_s) from now, "
            f"not {utc.isoformat()}"
        )
    return utc.replace(tzinfo=None)


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
        with self.db.transaction() as cur:
            job_id = _job_id(self.write(cur, [row], on_duplicate))
        self.wake()
        return job_id

    def enqueue_many(
        self,
        jobs: Iterable[Job],
        *,
        on_duplicate: OnDuplicate = "error",
        conn: Connection | None = None,
    ) -> int:
        """Enqueue all jobs or none, in one transaction; returns how many were given.

        Every job is validated before anything is written. A unique key already held by an active
        job of the same task (or twice in `jobs`) raises DuplicateJob and writes nothing, or with
        on_duplicate="keep" leaves the existing job as it is. Without `conn`, duecast commits and
        wakes the dispatcher. With `conn` (the caller's open transaction), nothing is committed
        here: the jobs exist only if the caller commits; call `wake()` after that commit to start
        them at once.
        """
        rows = [encode(job, self.jobs, self.tasks) for job in jobs]
        if not rows:
            return 0
        _check_unique_within(rows, on_duplicate)
        if conn is not None:
            with conn.cursor() as cur:
                self.write(cur, rows, on_duplicate)
            return len(rows)
        with self.db.transaction() as cur:
            self.write(cur, rows, on_duplicate)
        self.wake()
        return len(rows)

    def write(self, cur: Cursor, rows: Sequence[_Row], on_duplicate: OnDuplicate) -> Written:
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
                    raise DuplicateJob(
                        f"a pending or running job of the same task already holds this unique key {exc}"
                    ) from exc
            # InnoDB undid the whole statement: one row at a time now.
            for j, row in enumerate(chunk):
                holder = self._insert_or_find(cur, row)
                if holder is None:
                    last_id = int(cur.lastrowid or 0) if j == 0 else last_id
                else:
                    merged[i + j] = holder
        return Written(last_id, merged)

    def _insert(self, cur: Cursor, rows: Sequence[_Row]) -> int:
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

    def _insert_or_find(self, cur: Cursor, row: _Row) -> int | None:
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

    def _holder(self, cur: Cursor, row: _Row) -> int | None:
        if row.unique_key is not None:
            with translated():
                cur.execute(self.sql.find_unique_holder, (row.task, row.unique_key))
            found = cur.fetchone()
            if found is not None:
                return int(found[0])
        if row.schedule is not None:
            with translated():
                cur.execute(self.sql.find_scheduled_holder, (row.schedule, row.scheduled_for))
            found = cur.fetchone()
            if found is not None:
                return int(found[0])
        return None


def _job_id(written: Written) -> JobId:
    if 0 in written.merged:
        return JobId(written.merged[0], merged=True)
    return JobId(written.last_id)


def _check_unique_within(rows: list[_Row], on_duplicate: OnDuplicate) -> None:
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
