"""Cancelling jobs (Enqueuer.cancel, `duecast jobs cancel`) and a worker's read of which of the jobs
it runs were cancelled meanwhile (worker/cancels.py): by primary key, CHUNK ids per short transaction.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from ..queries.jobs import JobSQL, render_jobs
from ..queries.source import in_list
from .db import Database
from .pool import Pool

CHUNK = 1000  # ids per statement: one short transaction each, whatever the list's size


def cancel_jobs(db: Database | Pool, sql: JobSQL, ids: Iterable[int]) -> int:
    """The pending jobs among `ids` (waiting, scheduled, or members of a dispatched or running run)
    become cancelled, final; returns how many. Done, dead, cancelled or missing ones are left
    alone. A finish racing it is fenced on the same row (shared/queries/jobs.py, `cancel`)."""
    changed = 0
    for chunk in _chunks(ids):
        with db.transaction() as cur:  # a driver error leaves it as duecast's own (Database.transaction)
            changed += int(cur.execute(sql.cancel.format(ids=in_list("`id`", chunk))))
    return changed


def cancelled_among(db: Database | Pool, sql: JobSQL, ids: Iterable[int]) -> set[int]:
    """Which of `ids` are cancelled (a plain read: a worker asks of the jobs it holds)."""
    found: set[int] = set()
    for chunk in _chunks(ids):
        with db.transaction() as cur:
            cur.execute(sql.cancelled_among.format(ids=in_list("`id`", chunk)))
            found.update(int(r[0]) for r in cur.fetchall())
    return found


def _chunks(ids: Iterable[int]) -> Iterable[Sequence[int]]:
    every = sorted({int(i) for i in ids})  # in id order: two cancels of the same ids lock alike
    return (every[i : i + CHUNK] for i in range(0, len(every), CHUNK))


class JobCancels:
    """Both on one database handle, for a caller outside storage (the worker's cancel watch)."""

    def __init__(self, db: Database | Pool, jobs_table: str) -> None:
        self.db = db
        self.sql = render_jobs(jobs_table)

    def cancel(self, ids: Iterable[int]) -> int:
        return cancel_jobs(self.db, self.sql, ids)

    def cancelled_among(self, ids: Iterable[int]) -> set[int]:
        return cancelled_among(self.db, self.sql, ids)
