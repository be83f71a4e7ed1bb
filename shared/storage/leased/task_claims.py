"""A limited task's share of its queue's claim (`[jobs.task_limits]`): its pending runs, then its due
jobs no run holds, into runs of its own that name the task, up to what its limits granted. Runs in
the queue's claim transaction, under the queue's cursors' lock (claims of a queue never overlap)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from ...entries import Entry
from ...queries.job_runs import RunSQL
from ...queries.source import in_list
from ...queries.task_runs import TaskRunSQL
from ..packed import read_packed
from ..units import Cursor, StorageError
from .members import decode_members
from .runs import RUN_KEY

# JobStore's: (id, priority, interruptions) of due jobs -> runs of `task` (None: the queue's own).
MakeRuns = Callable[[Cursor, list[tuple[int, int, int]], "str | None"], list[Entry]]


@dataclass
class TaskClaim:
    """What one limited task's claim took: runs coming back (pending, given back), fresh runs, and
    the jobs of both (what its limits count)."""

    back: list[Entry] = field(default_factory=list)
    fresh: list[Entry] = field(default_factory=list)
    jobs: int = 0


class TaskClaims:
    """The claims of a queue's limited tasks; `make_runs(cur, jobs, task)` inserts runs (JobStore's)."""

    def __init__(self, queue: str, runs: RunSQL, sql: TaskRunSQL, run_size: int) -> None:
        self.queue = queue
        self.runs = runs
        self.sql = sql
        self.run_size = run_size

    def claim(self, cur: Cursor, task: str, limit: int, make_runs: MakeRuns) -> TaskClaim:
        """Up to `limit` jobs of `task` (a pending run is taken whole: at most one beyond it)."""
        got = TaskClaim()
        if limit <= 0:
            return got
        cur.execute(self.sql.claim_idle, (task, self.queue, max(1, limit // self.run_size)))
        found = [(int(i), int(a), int(n)) for i, a, n in cur.fetchall()]
        if found:
            cur.execute(self.runs.mark_dispatched.format(ids=in_list(RUN_KEY, (i for i, _, _ in found))))
            got.back = [Entry(i, a + 1) for i, a, _ in found]
            got.jobs = sum(n for _, _, n in found)
        left = limit - got.jobs
        if left <= 0:
            return got
        held, own = self._held(cur, task)
        # Its own runs' members are among its earliest due jobs: read past them. (A run of the
        # queue made before the limit was set may hold a few more: then this claim takes fewer.)
        packed = read_packed(cur, self.sql.read_due, (task, self.queue, left + own), what="a task's due jobs")
        if packed is None:
            raise StorageError(
                "a claim's packed read of a limited task's due jobs was cut short by the server "
                "(max_allowed_packet); raise it, or lower jobs.claim_batch"
            )
        rows = sorted((int(p), str(at), int(i), int(n)) for i, p, at, n in packed)  # claim order
        jobs = [(i, p, n) for p, _, i, n in rows if i not in held][:left]
        got.fresh = make_runs(cur, jobs, task)
        got.jobs += len(jobs)
        return got

    def _held(self, cur: Cursor, task: str) -> tuple[set[int], int]:
        """The job ids live runs hold that may be `task`'s, and how many its own runs hold. Read
        before its due jobs: a member that finishes in between has left pending, so it cannot be
        taken for one no run holds."""
        cur.execute(self.sql.held, (self.queue, task))
        held: set[int] = set()
        own = 0
        for run_task, members in cur.fetchall():
            ids = decode_members(members)
            held.update(ids)
            if run_task is not None:
                own += len(ids)
        return held, own
