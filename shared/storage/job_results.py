"""Reading one job's outcome for the application that enqueued it (Enqueuer.result): its state, the
task's return value kept with a done job, its last error. A read by primary key, or, for an enqueuer
account without SELECT, through the DBA's definer function (sql/grants.sql). Never locks a row.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from ..queries.jobs import JobSQL
from ..states import STATE_NAMES, State
from .db import Database
from .joined import joined
from .pool import Pool
from .units import StorageError, access_denied, translated


@dataclass(frozen=True)
class JobResult:
    """A job's outcome as `Enqueuer.result(id)` reads it. `state`: "pending" (waiting, or running:
    a job in flight reads pending until it ends), "done", "dead" or "cancelled". `value`: what the
    task returned (decoded JSON) once done, if it returned one and done jobs are kept
    (jobs.retention_s > 0)."""

    id: int
    state: str
    value: Any
    error: str | None  # the last failure's error and traceback, or why the job was discarded
    errors: int  # failed runs
    attempts: int  # runs that ended (failed, retried, done or dead)
    enqueued_at: datetime  # naive, in the database's time zone (NOW()'s)
    finished_at: datetime | None

    task: str | None = None  # read_job only: the job's task...
    payload: Any = None  # ...and its decoded payload
    started_at: datetime | None = None  # read_job only: when its last run started

    @property
    def finished(self) -> bool:
        return self.state in ("done", "dead", "cancelled")


def read_result(db: Database | Pool, sql: JobSQL, job_id: int) -> JobResult | None:
    """The job's outcome, or None when there is no such job (never enqueued, or pruned)."""
    with db.transaction() as cur:
        try:
            with translated():
                cur.execute(sql.read_result, (job_id,))
            row = cur.fetchone()
        except StorageError as exc:
            if not access_denied(exc):
                raise
            with translated():  # no SELECT granted: the DBA's function reads it (sql/grants.sql)
                cur.execute(sql.call_result, (job_id,))
            found = cur.fetchone()
            row = None if found is None or found[0] is None else tuple(json.loads(found[0]))
    return None if row is None else _result(job_id, row)


def read_job(handle: object, sql: JobSQL, job_id: int) -> JobResult | None:
    """The job's outcome with its task and payload, read on the caller's connection `handle`
    (anything `conn=` takes: storage.joined), in their transaction if they have one open."""
    with joined(handle, lambda: None) as cur, translated():
        cur.execute(sql.read_job, (job_id,))
        row = cur.fetchone()
    if row is None:
        return None
    base = _result(job_id, row[:7])
    task, payload, started = row[7:]
    return replace(base, task=str(task), payload=json.loads(payload), started_at=started)


def _result(job_id: int, row: Any) -> JobResult:
    state, value, error, errors, attempts, enqueued, finished = row
    return JobResult(
        id=int(job_id),
        state=STATE_NAMES[State(int(state))] if int(state) != State.RUNNING else "pending",
        value=None if value is None else json.loads(value),
        error=error,
        errors=int(errors),
        attempts=int(attempts),
        enqueued_at=_when(enqueued),
        finished_at=None if finished is None else _when(finished),
    )


def _when(value: object) -> datetime:
    """A DATETIME as the driver gives it, or as text from the function's JSON."""
    return value if isinstance(value, datetime) else datetime.fromisoformat(str(value))
