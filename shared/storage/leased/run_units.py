"""The per-run unit shape of the leased lifecycle (store.py): a run of a queue's jobs is dispatched,
started, leased and interrupted as one row of the runs table, and each job is finished on its own
row under its run's lock (runs.RunBatch). Job queues are dispatched so (jobs.py).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence, Set
from datetime import datetime
from typing import Any

from ...acks import Row
from ...entries import Entry
from ...queries.job_runs import RUN_ID_BASE, RunSQL
from ...queries.jobs import JOB_COLUMNS
from ...queries.source import START_TIME, fence, in_list
from ..packed import read_packed
from ..source_store import _scalar, _us
from ..units import Cursor, lock_or_skip
from .batch import LeasedBatch
from .keeper import Extended, renew_leases
from .members import decode_members, encode_members
from .runs import RUN_KEY, RunBatch
from .store import INTERRUPTED, Interrupted, LeasedStore, Started


class RunUnits(LeasedStore):
    """Leased work whose unit is a run of jobs: entries, leases and interruptions are the runs'."""

    runs: RunSQL
    queue: str
    _done: str  # the statement that finishes successes (kept as done, or deleted)
    _done_args: tuple[str, ...] | None  # ...and its arguments
    _result_max: int  # jobs.max_result_bytes, or -1 when done jobs are not kept (retention_s = 0)
    _told_no_results = False  # said once per store that results are not kept
    paused_tasks: Callable[[], Set[str]]  # the job tasks an operator paused (no I/O)

    # -- start -----------------------------------------------------------------------------------

    def _start_units(self, entries: Sequence[Entry], began: Started) -> None:
        """The entries' runs still DISPATCHED under their attempt -> RUNNING with a lease, and their
        jobs read: the clean runs together, or else one run of suspects; other runs of suspects
        stay DISPATCHED, in `later`, each to start alone once this is over. Stale entries, and
        entries of no run (a job's, from a duecast before runs), are skipped (`began.skipped` is all
        of them until the lock read tells)."""
        mine = [e for e in entries if e.id >= RUN_ID_BASE]
        if mine:
            with self.db.transaction(check=True) as cur:
                where = fence(mine, RUN_KEY)
                lock_or_skip(
                    lambda: cur.execute(self.runs.lock_dispatched.format(fence=where)),
                    lambda: cur.execute(self.runs.lock_dispatched_skip.format(fence=where)),
                )
                locked = [(Entry(int(i), int(a)), int(s), m) for i, a, s, m in cur.fetchall()]
                clean = [(e, m) for e, s, m in locked if s == 0]
                suspects = [(e, m) for e, s, m in locked if s > 0]
                go = clean or suspects[:1]
                began.later = [[e] for e, _ in (suspects if clean else suspects[1:])]
                began.units = [e for e, _ in go]
                began.skipped = len(entries) - len(began.units) - sum(len(g) for g in began.later)
                began.since = time.monotonic()  # before the leases' NOW(6): the keeper counts from here
                if go:
                    cur.execute(START_TIME)
                    began.at = _scalar(cur)  # this start's own time: what marks the runs as its own
                    ids = in_list(RUN_KEY, (e.id for e in began.units))
                    args = (began.at, began.at, self._lease_us, self.worker)
                    cur.execute(self.runs.mark_running.format(ids=ids), args)
                    for e, members in go:
                        for job in decode_members(members):
                            began.run_of[job] = e.id
                    began.rows = self._read_members(cur, list(began.run_of))
                    paused = self.paused_tasks()
                    if paused and any(r["task"] in paused for r in began.rows):
                        self._leave_paused(cur, began, go, paused)

    def _leave_paused(
        self, cur: Cursor, began: Started, go: list[tuple[Entry, Any]], paused: Set[str]
    ) -> None:
        """The members of paused tasks leave their runs in this start's transaction (fenced: the
        runs are locked under their attempt) and stay pending on their rows, which no run holds
        now: the claim passes over them while their task is paused and looks behind its cursors for
        them once it is resumed. A run left with no member goes."""
        left = {int(r["id"]) for r in began.rows if r["task"] in paused}
        began.rows = [r for r in began.rows if int(r["id"]) not in left]
        emptied = []
        for e, members in go:
            had = decode_members(members)
            keep = [j for j in had if j not in left]
            if len(keep) == len(had):
                continue
            if keep:
                cur.execute(self.runs.keep_members, (encode_members(keep), len(keep), e.id))
            else:
                emptied.append(e)
        for job in left:
            began.run_of.pop(job, None)
        if emptied:
            dropped = in_list(RUN_KEY, (e.id for e in emptied))
            cur.execute(self.runs.drop_runs.format(ids=dropped), (len(emptied),))
            began.units = [e for e in began.units if e not in emptied]
        self.scope.log.info(
            "%d jobs of paused tasks left pending, not started (%s)",
            len(left),
            ", ".join(sorted(paused)),
            extra={"event": "job.paused_left", "source": self.src.name, "count": len(left)},
        )

    def _started_by(self, cur: Cursor, began: Started) -> set[int]:
        stmt = self.runs.started_by.format(fence=fence(began.units, RUN_KEY))
        cur.execute(stmt, (began.at, self.worker))
        return {int(r[0]) for r in cur.fetchall()}

    def _read_members(self, cur: Cursor, ids: list[int]) -> list[Row]:
        """The members still pending, as a handler gets them: dc_attempt is this run's attempt."""
        if not ids:
            return []
        where = in_list("`id`", ids)
        packed = read_packed(cur, self.runs.member_rows.format(ids=where), what="jobs")
        if packed is None:
            cur.execute(self.runs.member_rows_plain.format(ids=where))
            packed = [list(r) for r in cur.fetchall()]
        rows = [dict(zip(JOB_COLUMNS, values, strict=True)) for values in packed]
        for row in rows:
            row["dc_attempt"] = int(row["dc_attempt"]) + 1
        return rows

    def _drop_empty(self, units: list[Entry]) -> None:
        """Runs started with no member left pending (each discarded meanwhile): nothing to run."""
        with self.db.transaction() as cur:
            cur.execute(self.runs.lock_running.format(fence=fence(units, RUN_KEY)))
            gone = [int(r[0]) for r in cur.fetchall()]
            if gone:
                cur.execute(self.runs.drop_runs.format(ids=in_list(RUN_KEY, gone)), (len(gone),))

    def _batch(self, began: Started, rows: list[Row]) -> LeasedBatch:
        runs = began.units if rows else []
        return RunBatch(
            self,
            rows,
            began.skipped,
            runs=runs,
            run_of=began.run_of,
            sql=self.runs,
            lease_us=self._lease_us,
            later=began.later,
        )

    def _give_back(self, cur: Cursor, began: Started) -> None:
        """The runs pending again now (fenced), to be dispatched under a new attempt."""
        cur.execute(self.runs.give_back.format(fence=fence(began.units, RUN_KEY)))

    def _renew(self, cur: Cursor, entries: Sequence[Entry]) -> Extended:
        return renew_leases(
            cur,
            entries,
            lambda chosen: fence(chosen, RUN_KEY),
            lock=self.runs.lock_leased,
            extend=self.runs.extend_lease,
            read=self.runs.leased,
            extend_args=(self._lease_us,),
        )

    # -- requeue: counted in jobs ------------------------------------------------------------------

    def release_unpushed(self, entries: Sequence[Entry]) -> int:
        """Returns the jobs the runs hold."""
        mine = [e for e in entries if e.id >= RUN_ID_BASE]
        if not mine:
            return 0
        with self.db.transaction() as cur:
            cur.execute(self.runs.lock_dispatched.format(fence=fence(mine, RUN_KEY)))
            found = {int(i): len(decode_members(m)) for i, _, _, m in cur.fetchall()}
            if not found:
                return 0
            cur.execute(self.runs.requeue_dispatched.format(ids=in_list(RUN_KEY, found)))
            return sum(found.values())

    def _requeue_dispatched(self, after_s: float, limit: int) -> int:
        with self.db.transaction() as cur:
            cur.execute(self.runs.expired_dispatched, (self.queue, _us(after_s), limit))
            found = [int(r[0]) for r in cur.fetchall()]
            if not found:
                return 0
            ids = in_list(RUN_KEY, found)
            cur.execute(self.runs.jobs_of_runs.format(ids=ids))
            jobs = int(_scalar(cur) or 0)
            cur.execute(self.runs.requeue_dispatched.format(ids=ids))
            return jobs

    def _interrupt_expired(self, cur: Cursor, limit: int) -> tuple[int, int]:
        cur.execute(self.runs.expired_running, (self.queue, limit))
        return self._interrupt_runs(cur, cur.fetchall(), INTERRUPTED)

    def _interrupt_worker(
        self, cur: Cursor, worker: str, why: str, limit: int, fenced: bool
    ) -> tuple[int, int, bool]:
        """Up to `limit` runs of `worker` (an exited process): found without locking, then locked by
        id, so no other worker's run is locked or waited for. Returns (jobs, dead, more runs left?)."""
        cur.execute(self.runs.find_worker_running, (self.queue, worker, limit))
        ids = [int(r[0]) for r in cur.fetchall()]
        if not ids:
            return 0, 0, False
        cur.execute(self.runs.lock_worker_running.format(ids=in_list(RUN_KEY, ids)), (worker,))
        return (*self._interrupt_runs(cur, cur.fetchall(), why, fenced), len(ids) >= limit)

    def _interrupt_runs(
        self, cur: Cursor, locked: Sequence[Sequence[Any]], why: str, fenced: bool = False
    ) -> tuple[int, int]:
        """Runs (locked: id, members, worker, started_at) whose worker is gone: their members still pending
        are each interrupted once (pending again now, ahead of the cursor), or dead when one ran
        alone for the max_interruptions-th time (`_blame`); the runs go. Returns (jobs
        interrupted, jobs dead)."""
        runs = {int(i): (decode_members(m), w, at) for i, m, w, at in locked}
        if not runs:
            return 0, 0
        # A job ran with its run (a job "ran alone" when its run held no other member still
        # pending), on that run's worker and from its start, which its row records.
        ran_in = {job: (run, worker, at) for run, (members, worker, at) in runs.items() for job in members}
        found: list[Interrupted] = []
        if ran_in:
            cur.execute(self.runs.member_interruptions.format(ids=in_list("`id`", ran_in)))
            found = [(int(i), int(n), ran_in[int(i)], str(ran_in[int(i)][1])) for i, n in cur.fetchall()]
        dead = self._blame(cur, found, why, fenced)
        cur.execute(self.runs.drop_runs.format(ids=in_list(RUN_KEY, runs)), (len(runs),))
        return len(found), len(dead)

    def _interrupted(
        self,
        cur: Cursor,
        found: Sequence[Interrupted],
        ids: list[int],
        why: str,
        *,
        dead: bool,
        counted: bool = True,
    ) -> None:
        """One statement per run: each job records the worker it was running on, and since when."""
        runs = self.runs
        stmt = (
            runs.interrupted_dead if dead else runs.interrupted_retry if counted else runs.interrupted_excused
        )
        ran_in = {i: group for i, _, group, _ in found}
        by_run: dict[tuple[int, Any, Any], list[int]] = {}  # (run, worker, started_at) -> jobs
        for job in ids:
            by_run.setdefault(ran_in[job], []).append(job)
        for (_, worker, at), jobs in by_run.items():
            cur.execute(stmt.format(ids=in_list("`id`", jobs)), (worker, at, why))

    # -- finishing, under the runs' locks (RunBatch): members still pending --------------------------
    # Each row carries its run's started_at, read under that lock (RunBatch._fenced).

    def finish_ok(self, cur: Cursor, rows: Sequence[Row]) -> int:
        if self._done_args is None:  # deleted: nothing to record
            return int(cur.execute(self._done.format(ids=_ids(rows)), (len(rows),)))
        by_start: dict[Any, list[Row]] = {}  # one statement per run start (one, usually)
        for row in rows:
            by_start.setdefault(row.get("started_at"), []).append(row)
        done = 0
        for at, group in by_start.items():
            done += int(cur.execute(self._done.format(ids=_ids(group)), (*self._done_args, at)))
        return done

    def finish_ok_with_result(self, cur: Cursor, row: Row, result: str) -> int:
        """A done job whose task returned a value: kept with it, if done jobs are kept and it fits."""
        if self._result_max < 0:  # deleted at once: nowhere to keep it
            if not self._told_no_results:
                self._told_no_results = True
                self.scope.log.warning(
                    "a task of %s returned a value (job %s), but jobs.retention_s = 0 deletes done jobs "
                    "at once: no result is kept; set jobs.retention_s to read results",
                    self.scope.place,
                    row["id"],
                    extra={"event": "job.result_not_kept", "source": self.src.name},
                )
            return self.finish_ok(cur, [row])
        kept, note = kept_result(result, self._result_max)
        args = (self.worker, kept, note)
        return int(cur.execute(self.runs.finish_done_result.format(ids=_ids([row])), args))

    def finish_dead(self, cur: Cursor, row: Row, text: str, errors: int, outcome: str = "dead") -> int:
        args = (errors, self.worker, row.get("started_at"), text)
        return int(cur.execute(self.runs.fail_dead.format(ids=_ids([row])), args))

    def _fail_retry(self, cur: Cursor, row: Row, delay_us: int, text: str) -> int:
        args = (self.worker, row.get("started_at"), delay_us, text)
        return int(cur.execute(self.runs.fail_retry.format(ids=_ids([row])), args))

    def _snooze(self, cur: Cursor, row: Row, at: datetime | None, delay_us: int) -> int:
        ids, ran = _ids([row]), (self.worker, row.get("started_at"))
        if at is not None:
            return int(cur.execute(self.runs.snooze_at.format(ids=ids), (*ran, at)))
        return int(cur.execute(self.runs.snooze_delay.format(ids=ids), (*ran, delay_us)))


def kept_result(result: str, limit: int) -> tuple[str | None, str | None]:
    """(result to keep, note for last_error): a result over `limit` bytes of UTF-8 is not kept, and
    the note says so; limit 0 keeps none, silently (a setting, not a surprise)."""
    if limit == 0:
        return None, None
    size = len(result.encode("utf-8"))
    if size > limit:
        return None, f"result not kept: {size:,} bytes of JSON, over jobs.max_result_bytes ({limit:,})"
    return result, None


def _ids(rows: Sequence[Row]) -> str:
    return in_list("`id`", (int(r["id"]) for r in rows))
