"""Writing jobs to the jobs table: the batched INSERT, a duplicate unique key merged into the active
job holding it, and every new row's id, in the writer's own transaction or the caller's. Runs
shared.queries.jobs.JobSQL; what a valid job is, is shared/api/job_input.py's (it builds the JobRow).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from ..errors import DuecastError
from ..fanout.client import RedisClient
from ..queries.jobs import render_jobs
from ..settings import Settings
from .outbox import Outbox
from .units import Cursor, DuplicateKey, StorageError, access_denied, translated

INSERT_CHUNK = 500  # rows per multi-row INSERT: 500 x 64 KiB stays under the default 64 MiB packet
MERGE_TRIES = 3  # a duplicate whose holder finished before we could read it: insert again
OnDuplicate = Literal["error", "keep"]


class EnqueueError(DuecastError, ValueError):
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
class JobRow:
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
    meta: str | None = None  # JSON: what enqueue middleware carries to the run (a trace context)
    concurrency_key: str | None = None  # written only by insert_keyed (older grants lack the column)

    """A validated job, as the INSERT takes it."""

    def params(self, scheduled: bool = False, keyed: bool = False) -> tuple[Any, ...]:
        """The values of one row; `scheduled`: of a statement with the schedule columns, `keyed`:
        with the concurrency key's."""
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
            self.meta,
        )
        if scheduled:
            return (*values, self.schedule, self.scheduled_for)
        return (*values, self.concurrency_key) if keyed else values


@dataclass(frozen=True)
class Written:
    """What one `JobWriter.write` did."""

    last_id: int  # the id of the last INSERT's first row: a one-row write's job, unless merged
    merged: dict[int, int]  # on_duplicate="keep": index in the rows given -> the active job kept


class JobWriter(Outbox):
    """Writes job rows; `tasks` are the app's registered tasks (None: not checked), for its callers."""

    def __init__(
        self, settings: Settings, client: RedisClient | None, tasks: frozenset[str] | None = None
    ) -> None:
        super().__init__(settings, client)
        self.jobs = settings.jobs
        self.tasks = tasks
        self.sql = render_jobs(self.jobs.table)
        self._ids_how: str | None = None  # how write_ids learns the new ids on this server

    def insert_rows(
        self, rows: Sequence[JobRow], on_duplicate: OnDuplicate, conn: object | None, what: str
    ) -> Written:
        """write() in the caller's open transaction `conn` (nothing committed here), or without it in
        a transaction of our own, committed (Outbox.on_own_connection)."""
        if conn is not None:
            with self.joined(conn) as cur:
                return self.write(cur, rows, on_duplicate)
        return self.on_own_connection(lambda cur: self.write(cur, rows, on_duplicate), what)

    def insert_rows_with_ids(
        self, rows: Sequence[JobRow], on_duplicate: OnDuplicate, conn: object | None, what: str
    ) -> list[JobId]:
        """write_ids() in the caller's open transaction `conn`, or in one of our own, committed."""
        if conn is not None:
            with self.joined(conn) as cur:
                return self.write_ids(cur, rows, on_duplicate)
        return self.on_own_connection(lambda cur: self.write_ids(cur, rows, on_duplicate), what)

    def insert_in_chunks(
        self,
        rows: Sequence[JobRow],
        on_duplicate: OnDuplicate,
        chunk: int,
        done: Callable[[int, Written], None],
    ) -> None:
        """All `rows` in one transaction of our own, written `chunk` at a time, calling `done(first
        index, what was written)` after each (a progress bar); not retried: a large file is the
        operator's to run again."""
        with self.db.transaction() as cur:
            for i in range(0, len(rows), chunk):
                done(i, self.write(cur, rows[i : i + chunk], on_duplicate))

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
        # Only jobs given a key name its column: without one, the INSERT is as before.
        keyed = not scheduled and any(r.concurrency_key is not None for r in rows)
        head, values = (
            (self.sql.insert_scheduled, self.sql.insert_scheduled_values)
            if scheduled
            else (self.sql.insert_keyed, self.sql.insert_keyed_values)
            if keyed
            else (self.sql.insert, self.sql.insert_values)
        )
        params = [p for r in rows for p in r.params(scheduled, keyed)]
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
