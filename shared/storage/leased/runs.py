"""Work a job queue's store started as runs: its jobs' finishes, fenced by their run's row.

A run's jobs keep their rows untouched while they run; each finish locks the run's row (still
RUNNING under the attempt started), finishes the jobs still among its members, and takes them out of
`members` (the run's row goes with its last member), all in one transaction.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Sequence

from ...acks import Row
from ...entries import Entry
from ...queries.job_runs import RunSQL
from ...queries.source import fence, in_list
from ..units import Cursor
from .batch import Finisher, LeasedBatch
from .members import decode_members, encode_members

RUN_KEY = "`id`"


class RunBatch(LeasedBatch):
    """Jobs of the runs a worker started in one start. The lease keeper keeps the runs' leases."""

    def __init__(
        self,
        store: Finisher,
        rows: list[Row],
        skipped: int,
        *,
        runs: Sequence[Entry],
        run_of: dict[int, int],
        sql: RunSQL,
        lease_us: int,
        later: list[list[Entry]] | None = None,
    ) -> None:
        super().__init__(store, rows, skipped, later)
        self.entries = list(runs)  # what the lease keeper holds: the runs, not their jobs
        self._runs = {e.id: e for e in runs}
        self._run_of = run_of  # job id -> its run's id
        self._sql = sql
        self._lease_us = lease_us
        self._members: dict[int, set[int]] = {}  # run id -> members, as locked by the last _fenced

    def _fenced(self, cur: Cursor, rows: Sequence[Row]) -> set[int]:
        """Lock the rows' runs still RUNNING under the attempt this worker started; the rows of
        those runs still among their members are this batch's to finish, each given its run's
        `started_at` (the start of this attempt, which its finish writes into the job's row)."""
        runs = {self._run_of[int(r["id"])] for r in rows}
        if not runs:
            return set()
        cur.execute(self._sql.lock_running.format(fence=fence((self._runs[i] for i in runs), RUN_KEY)))
        locked = cur.fetchall()
        if self.hold is not None:  # held by this transaction now: the keeper may count them as kept
            self.hold.own(int(r[0]) for r in locked)
        self._members = {int(i): set(decode_members(m)) for i, m, _ in locked}
        started = {int(i): at for i, _, at in locked}
        mine = set()
        for r in rows:
            job = int(r["id"])
            if job in self._members.get(self._run_of[job], ()):
                mine.add(job)
                r["started_at"] = started[self._run_of[job]]
        return mine

    def _finished(self, cur: Cursor, rows: Sequence[Row]) -> None:
        """Take the finished jobs out of their runs' members; a run left with none goes, and every
        other run this transaction locked has its lease extended."""
        self._extended_at = time.monotonic()  # before these statements' NOW(6)
        by_run: dict[int, set[int]] = defaultdict(set)
        for r in rows:
            job = int(r["id"])
            by_run[self._run_of[job]].add(job)
        emptied = []
        for run, done in by_run.items():
            left = self._members.get(run, set()) - done
            self._members[run] = left
            if left:
                cur.execute(self._sql.keep_members, (encode_members(left), len(left), run))
            else:
                emptied.append(run)
        if emptied:
            if self.hold is not None:  # its row leaving is the run's end, not a lost lease
                self.hold.finishing(emptied)
            cur.execute(self._sql.drop_runs.format(ids=in_list(RUN_KEY, emptied)), (len(emptied),))
        self._extend_locked(cur, [run for run in self._members if run not in emptied])

    def _extend_locked(self, cur: Cursor, runs: Sequence[int]) -> None:
        """Extend the leases of the runs this transaction locked, as it ends: the keeper's renewals
        skipped them meanwhile (counted as kept: Hold.own), and a slow transactional task may have
        held them for longer than a lease."""
        if not runs:
            return
        cur.execute(
            self._sql.extend_lease.format(fence=fence((self._runs[i] for i in runs), RUN_KEY)),
            (self._lease_us,),
        )

    def give_back(self) -> int:
        """None of these runs' jobs ran (a worker leaving with stuck threads had started them, to run
        beside nothing): the runs go back to pending now, fenced on the attempt started, as a late
        start's do; no job counts an interruption or an attempt for them, where letting their leases
        run out would blame whoever is left in them. Returns the runs given back."""
        runs = list(self._runs.values())
        self.close()  # first: a run leaving RUNNING under a kept lease reads as a lost lease
        if not runs:
            return 0
        with self._store.db.transaction() as cur:
            return int(cur.execute(self._sql.give_back.format(fence=fence(runs, RUN_KEY))))
