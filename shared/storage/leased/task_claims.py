"""A limited task's share of its queue's claim (`[jobs.task_limits]`): its pending runs, then its due
jobs no run holds, into runs of its own that name the task, up to what its limits granted. Runs in
the queue's claim transaction, under the queue's cursors' lock (claims of a queue never overlap)."""

from __future__ import annotations

import bisect
from collections.abc import Callable
from dataclasses import dataclass, field

from ...entries import Entry
from ...queries.job_runs import RunSQL
from ...queries.source import in_list
from ...queries.task_runs import TaskRunSQL
from ..packed import read_packed
from ..units import Cursor, StorageError
from .members import member_ranges
from .runs import RUN_KEY

MAX_ID = 2**63  # above every job id: bisect's bound for a range starting at an id
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
        jobs = [(i, p, n) for p, _, i, n in rows if not held_by(held, i)][:left]
        got.fresh = make_runs(cur, jobs, task)
        got.jobs += len(jobs)
        return got

    def _held(self, cur: Cursor, task: str) -> tuple[list[tuple[int, int]], int]:
        """The id ranges of the live runs that may hold `task`'s jobs, sorted, and how many jobs its
        own runs hold. Read before its due jobs: a member that finishes in between has left
        pending, so it cannot be taken for one no run holds. Ranges, not ids: the queue's other
        runs may hold tens of thousands, and only the few read are asked about."""
        cur.execute(self.sql.held, (self.queue, task))
        held: list[tuple[int, int]] = []
        own = 0
        for run_task, members in cur.fetchall():
            ranges = member_ranges(members)
            held += ranges
            if run_task is not None:
                own += sum(hi - lo + 1 for lo, hi in ranges)
        held.sort()
        return held, own


def held_by(held: list[tuple[int, int]], job: int) -> bool:
    """Whether `job` is in one of the sorted, disjoint ranges (a job is in at most one run)."""
    k = bisect.bisect_right(held, (job, MAX_ID)) - 1
    return k >= 0 and held[k][0] <= job <= held[k][1]
