"""A job queue's store: its due jobs dispatched, started, leased and fenced in runs.

A run is up to jobs.run_size due jobs of one queue and priority, read past that priority's cursor in
claim order; one row of the runs table and one ready-list entry stand for all of them, and their own
rows are written once, when each finishes (docs/architecture.md, "Job runs"). Backoff, pruning and
the status by state are kept here too; the SQL is in shared/queries/jobs.py and job_runs.py.
"""

from __future__ import annotations

import logging
import random
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ...acks import Ack, Row
from ...entries import Entry
from ...policy import (
    blame_interruptions,
    dead_after_failure,
    form_runs,
    look_behind_every_s,
    retry_delay_s,
)
from ...queries.job_runs import RUN_ID_BASE, RunSQL, cursor_rows, render_runs
from ...queries.jobs import (
    DEAD,
    DISPATCHED,
    DONE,
    IDLE,
    JOB_COLUMNS,
    RUNNING,
    JobSQL,
    render_jobs,
)
from ...queries.source import fence, in_list
from ...settings import JobsSettings, MySQLSettings, SourceSettings
from ...telemetry import observe
from ..db import Database
from ..packed import read_packed
from ..schema import check_jobs_table
from ..source_store import STATUS_COUNT_CAP, SourceStatus, _scalar, _us
from ..units import MYSQL_ERRORS, Cursor, StorageError, lock_or_skip
from ..worker_registry import worker_name
from .batch import error_text, finish_group
from .keeper import Extended, LeaseKeeper, renew_leases
from .members import decode_members, encode_members
from .runs import RUN_KEY, RunBatch

log = logging.getLogger("duecast.jobs")
INTERRUPTED = "interrupted: its worker stopped (killed, crashed or stalled) before finishing it"
BEHIND_LIMIT = 1_000_000  # the jobs a look behind reads at most: the runs in flight, and those left
Key = tuple[datetime | str, int]  # a cursor: (run_at, id)


@dataclass(frozen=True)
class JobNaming:
    """How a RunBatch names a queue's jobs (shared.storage.leased.batch.Naming)."""

    key: str
    noun: str
    log: logging.Logger


class JobStore:
    """One queue of the jobs table, dispatched in runs."""

    def __init__(self, db: Database, src: SourceSettings, jobs: JobsSettings, mysql: MySQLSettings) -> None:
        self.db = db
        self.src = src
        self.jobs = jobs
        self.queue = src.name.split(".", 1)[1]
        self.sql: JobSQL = render_jobs(jobs.table)
        self.runs: RunSQL = render_runs(jobs.table, jobs.runs_table, jobs.cursors_table, JOB_COLUMNS)
        self.scope = JobNaming("id", "job", log)
        self._done = self.runs.finish_done if jobs.retention_s > 0 else self.runs.finish_delete
        self.max_interruptions = jobs.max_interruptions
        self.worker = worker_name()
        self.rows_per_entry = jobs.run_size  # a worker pops entries for this many jobs each
        self.claim_weight = jobs.run_size  # claim_batch and high_water count jobs
        self._lease_us = _us(jobs.lease_s)
        self._leases = LeaseKeeper(self.extend_leases, jobs.lease_s, mysql, f"job runs of {src.name}")
        self._rng = random.Random()
        self._cursors_made = False
        self.claimed_rows = 0  # jobs in the runs the last claim made or dispatched again
        self._behind_at = 0.0  # time.monotonic() of the last look behind the cursors
        self._behind_every_s = 0.0  # shared.policy.look_behind_every_s of the jobs in runs then

    @property
    def id_column(self) -> str:
        return "id"

    def verify(self) -> None:
        with self.db.transaction() as cur:
            check_jobs_table(cur, self.jobs)

    # -- claim ---------------------------------------------------------------------------------

    def claim_due(self, limit: int) -> list[Entry]:
        """Up to `limit` due jobs, in runs: pending runs first, then jobs no run holds behind the
        cursors (shared.policy.look_behind_every_s), then jobs past the cursors in claim order. Each run is
        committed DISPATCHED under a new attempt on return; no job row is written."""
        if not self._cursors_made:
            values, args = cursor_rows(self.queue)
            with self.db.transaction() as cur:
                cur.execute(self.runs.ensure_cursors.format(rows=values), args)
            self._cursors_made = True
        with self.db.transaction() as cur:
            cur.execute(self.runs.lock_cursors, (self.queue,))
            cursors: dict[int, Key] = {int(p): (at, int(i)) for p, at, i in cur.fetchall()}
            entries, left = self._claim_pending(cur, limit)
            now = time.monotonic()
            if left > 0 and now - self._behind_at >= self._behind_every_s:
                self._behind_at = now
                behind, left = self._claim_behind(cur, cursors, left)
                entries += behind
            if left > 0:
                ahead = self._claim_ahead(cur, cursors, left)
                entries += ahead[0]
                left -= ahead[1]
        self.claimed_rows = limit - left
        return entries

    def _claim_pending(self, cur: Cursor, limit: int) -> tuple[list[Entry], int]:
        runs = max(1, limit // self.jobs.run_size)
        cur.execute(self.runs.claim_idle, (self.queue, runs))
        found = [(int(i), int(a), int(n)) for i, a, n in cur.fetchall()]
        if not found:
            return [], limit
        cur.execute(self.runs.mark_dispatched.format(ids=in_list(RUN_KEY, (i for i, _, _ in found))))
        return [Entry(i, a + 1) for i, a, _ in found], limit - sum(n for _, _, n in found)

    def _claim_behind(self, cur: Cursor, cursors: dict[int, Key], limit: int) -> tuple[list[Entry], int]:
        """Due jobs at or behind their cursor that no run holds. The runs are read first: a run's
        member that finishes between the two reads has left pending (deleted, done, dead or due
        later), so the second read cannot take it for one no run holds."""
        cur.execute(self.runs.jobs_in_runs, (self.queue,))
        held_count = int(_scalar(cur) or 0)
        self._behind_every_s = look_behind_every_s(held_count)
        cursor_args = self._cursor_args(cursors)
        cur.execute(self.runs.count_behind, (self.queue, *cursor_args))
        if int(_scalar(cur) or 0) <= held_count:
            return [], limit  # every due job behind the cursors is a run's (the usual case)
        cur.execute(self.runs.live_members, (self.queue,))
        held: set[int] = set()
        for (members,) in cur.fetchall():
            held.update(decode_members(members))
        args = (self.queue, *cursor_args, BEHIND_LIMIT)
        packed = _whole(read_packed(cur, self.runs.read_behind, args, what="jobs behind the cursors"))
        left = [(int(i), int(p), int(n)) for i, p, n in packed if int(i) not in held][:limit]
        if left:
            log.info(
                "%d due jobs of queue %s were behind the dispatch cursor (committed late, or enqueued "
                "with a past run_at); dispatching them now",
                len(left),
                self.queue,
                extra={"event": "job.behind_cursor", "source": self.src.name, "count": len(left)},
            )
        return self._make_runs(cur, left), limit - len(left)

    def _claim_ahead(self, cur: Cursor, cursors: dict[int, Key], limit: int) -> tuple[list[Entry], int]:
        args = (self.queue, *self._cursor_args(cursors), limit)
        packed = _whole(read_packed(cur, self.runs.read_ahead, args, what="due jobs"))
        if not packed:
            return [], 0
        rows = sorted((int(p), str(at), int(i), int(n)) for p, at, i, n in packed)  # claim order
        last: dict[int, tuple[str, int]] = {}
        for p, at, i, _ in rows:
            last[p] = (at, i)  # the last of each priority
        for p, (at, i) in last.items():
            cur.execute(self.runs.advance_cursor, (at, i, self.queue, p))
        return self._make_runs(cur, [(i, p, n) for p, _, i, n in rows]), len(rows)

    def _make_runs(self, cur: Cursor, jobs: list[tuple[int, int, int]]) -> list[Entry]:
        """(id, priority, interruptions) of due jobs -> runs, one per priority and group
        (shared.policy.form_runs), inserted DISPATCHED under attempt 1."""
        by_priority: dict[int, list[tuple[int, int]]] = {}
        for i, p, n in jobs:
            by_priority.setdefault(p, []).append((i, n))
        entries = []
        for p, members in sorted(by_priority.items()):
            counts = [n for _, n in members]
            for group in form_runs(counts, self.jobs.run_size, self.max_interruptions):
                ids = [members[k][0] for k in group]
                suspects = max(counts[k] for k in group)
                cur.execute(self.runs.insert_run, (self.queue, p, suspects, len(ids), encode_members(ids)))
                run = int(cur.lastrowid)
                if run < RUN_ID_BASE:  # the runs table lost its AUTO_INCREMENT start: ids would clash
                    raise StorageError(
                        f"{self.jobs.runs_table} gave run id {run}, below {RUN_ID_BASE}: its AUTO_INCREMENT "
                        f"was changed; run ALTER TABLE {self.jobs.runs_table} AUTO_INCREMENT = {RUN_ID_BASE}"
                    )
                entries.append(Entry(run, 1))
        return entries

    @staticmethod
    def _cursor_args(cursors: dict[int, Key]) -> list[Any]:
        args: list[Any] = []
        for p in range(10):
            at, i = cursors.get(p, (datetime(1000, 1, 1), 0))
            args += [at, at, i]
        return args

    # -- start ---------------------------------------------------------------------------------

    @contextmanager
    def started(self, entries: Sequence[Entry], columns: Sequence[str] = ()) -> Iterator[RunBatch]:
        batch = self.start(entries, columns)
        try:
            yield batch
        finally:
            batch.close()

    def start(self, entries: Sequence[Entry], columns: Sequence[str] = ()) -> RunBatch:
        """The entries' runs still DISPATCHED under their attempt -> RUNNING with a lease, committed
        on return, and their jobs read: the clean runs together, or else one run of suspects; other
        runs of suspects stay DISPATCHED, in `batch.later`, each to start alone once this is over.
        Stale entries, and entries of no run (a job's, from a duecast before runs), are skipped."""
        if not entries:
            raise ValueError("start() needs at least one entry")
        mine = [e for e in entries if e.id >= RUN_ID_BASE]
        rows: list[Row] = []
        run_of: dict[int, int] = {}
        first: list[Entry] = []
        later: list[list[Entry]] = []
        since = time.monotonic()
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
                later = [[e] for e, _ in (suspects if clean else suspects[1:])]
                first = [e for e, _ in go]
                since = time.monotonic()  # before the leases' NOW(6): the keeper counts from here
                if go:
                    ids = in_list(RUN_KEY, (e.id for e in first))
                    cur.execute(self.runs.mark_running.format(ids=ids), (self._lease_us, self.worker))
                    for e, members in go:
                        for job in decode_members(members):
                            run_of[job] = e.id
                    rows = self._read_members(cur, list(run_of))
        if rows and not self._leases.in_time(since):
            rows = self._give_back_late(first, len(rows), time.monotonic() - since)
        elif first and not rows:
            self._drop_empty(first)
        skipped = len(entries) - len(first) - sum(len(g) for g in later)
        batch = RunBatch(
            self, rows, skipped, runs=first if rows else [], run_of=run_of, sql=self.runs, later=later
        )
        if rows:
            batch.keep(self._leases.holding(batch.entries, since))
        return batch

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

    def _drop_empty(self, runs: list[Entry]) -> None:
        """Runs started with no member left pending (each discarded meanwhile): nothing to run."""
        with self.db.transaction() as cur:
            cur.execute(self.runs.lock_running.format(fence=fence(runs, RUN_KEY)))
            gone = [int(r[0]) for r in cur.fetchall()]
            if gone:
                cur.execute(self.runs.drop_runs.format(ids=in_list(RUN_KEY, gone)))

    def _give_back_late(self, runs: list[Entry], jobs: int, took_s: float) -> list[Row]:
        """A start whose commit stalled so long that its leases may run out before the keeper
        confirms one: run nothing, and make the runs pending again now (fenced), to be dispatched
        under a new attempt. If even that fails, the leases run out and the sweeper takes them."""
        log.warning(
            "starting %d jobs of queue %s took %.1fs of their %gs lease; running none of them and making "
            "them due again, so that none runs once its lease may have run out",
            jobs,
            self.queue,
            took_s,
            self._lease_us / 1e6,
            extra={"event": "job.start_too_late", "source": self.src.name, "count": jobs},
        )
        try:
            with self.db.transaction() as cur:
                cur.execute(self.runs.give_back.format(fence=fence(runs, RUN_KEY)))
        except MYSQL_ERRORS as exc:
            log.warning("could not give back the late-started job runs: %s", exc)
        return []

    def extend_leases(self, db: Database, entries: Sequence[Entry]) -> Extended:
        """Extend the runs' leases still ours (shared.storage.leased.keeper.renew_leases)."""
        with db.transaction() as cur:
            return renew_leases(
                cur,
                entries,
                lambda chosen: fence(chosen, RUN_KEY),
                lock=self.runs.lock_leased,
                extend=self.runs.extend_lease,
                read=self.runs.leased,
                extend_args=(self._lease_us,),
            )

    def group_key(self, ack: Ack) -> Any:
        return finish_group(ack, "a job's handler")

    # -- finishing, used by RunBatch under its runs' locks: members still pending ----------------

    def finish_ok(self, cur: Cursor, rows: Sequence[Row]) -> int:
        args = (self.worker,) if self.jobs.retention_s > 0 else None
        return int(cur.execute(self._done.format(ids=self._ids(rows)), args))

    def finish_failed(self, cur: Cursor, row: Row, outcome: object) -> str:
        """A failed run: "retried" (pending after the backoff) or "dead"; "" when it was stale."""
        text = error_text(outcome)
        delay_s = self._retry_in(row)
        if delay_s is None:
            return "dead" if self.finish_dead(cur, row, text, 1) else ""
        n = cur.execute(self.runs.fail_retry.format(ids=self._ids([row])), (self.worker, _us(delay_s), text))
        return "retried" if n else ""

    def finish_dead(self, cur: Cursor, row: Row, text: str, errors: int) -> int:
        return int(cur.execute(self.runs.fail_dead.format(ids=self._ids([row])), (errors, self.worker, text)))

    def finish_special(self, cur: Cursor, row: Row, ack: Ack) -> int:
        """A handler's explicit retry (not a failure) or discard (dead now)."""
        if ack.action == "discard":
            text = "discarded by its task" + (f": {ack.reason}" if ack.reason else "")
            return self.finish_dead(cur, row, text, 0)
        ids = self._ids([row])
        if ack.at is not None:
            return int(cur.execute(self.runs.snooze_at.format(ids=ids), (self.worker, ack.at)))
        return int(cur.execute(self.runs.snooze_delay.format(ids=ids), (self.worker, _us(ack.delay_s))))

    def _retry_in(self, row: Row) -> float | None:
        """Exponential backoff with jitter, until this failure uses up the job's max_attempts."""
        errors = int(row["errors"])
        if dead_after_failure(errors, int(row["max_attempts"])):
            log.error(
                "job %s dead after %d failed attempts",
                row["id"],
                errors + 1,
                extra={"event": "job.dead", "source": self.src.name, "job_id": int(row["id"])},
            )
            return None
        return retry_delay_s(errors + 1, self.jobs.retry_base_s, self.jobs.retry_cap_s, self._rng)

    @staticmethod
    def _ids(rows: Sequence[Row]) -> str:
        return in_list("`id`", (int(r["id"]) for r in rows))

    # -- requeue -----------------------------------------------------------------------------------

    def requeue_expired(self, visibility_timeout_s: float, limit: int) -> int:
        """Runs dispatched and never started -> pending; runs whose lease ran out -> interrupted;
        and jobs an older duecast left dispatched or running on their own rows -> pending."""
        with self.db.transaction() as cur:
            legacy = int(cur.execute(self.runs.requeue_legacy, (self.queue, _us(visibility_timeout_s))))
        return legacy + self._requeue_dispatched(visibility_timeout_s, limit) + self.interrupt_expired(limit)

    def requeue_lost(self, limit: int) -> int:
        """Every DISPATCHED run no worker started -> pending now: Redis lost its entries."""
        return self._requeue_dispatched(0.0, limit)

    def requeue_interrupted(self, limit: int) -> int:
        return self.interrupt_expired(limit)

    def requeue_held(self, entries: Sequence[Entry]) -> int:
        """A dead worker's popped runs, never started -> pending now (fenced)."""
        return self.release_unpushed(entries)

    def release_unpushed(self, entries: Sequence[Entry]) -> int:
        """Claimed but never pushed (Redis refused) -> pending now, fenced on the new attempt;
        returns the jobs they hold."""
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

    def interrupt_expired(self, limit: int) -> int:
        """RUNNING runs whose lease ran out: their worker died."""
        with self.db.transaction() as cur:
            cur.execute(self.runs.expired_running, (self.queue, limit))
            found, dead = self._interrupt_runs(cur, cur.fetchall(), INTERRUPTED)
        observe.count(self.src.name, "dead", dead)
        return found

    def interrupt_worker(self, worker: str, why: str, limit: int = 10_000) -> int:
        """RUNNING runs of `worker`, a process its supervisor saw exit (waitpid: nothing of it can
        still run) -> interrupted now, as if their leases had run out (`why` is their jobs'
        last_error). Never for a process that may still run. Returns the jobs interrupted."""
        with self.db.transaction() as cur:
            cur.execute(self.runs.worker_running, (self.queue, worker, limit))
            found, dead = self._interrupt_runs(cur, cur.fetchall(), why)
        observe.count(self.src.name, "dead", dead)
        return found

    def _interrupt_runs(self, cur: Cursor, locked: Sequence[Sequence[Any]], why: str) -> tuple[int, int]:
        """Runs (locked: id, members, worker) whose worker is gone: their members still pending
        are each interrupted once (pending again now, ahead of the cursor), or dead when one ran
        alone for the max_interruptions-th time (shared.policy.blame_interruptions); the runs go.
        Returns (jobs interrupted, jobs dead)."""
        cap = self.max_interruptions
        runs = [(int(i), decode_members(m), w) for i, m, w in locked]
        if not runs:
            return 0, 0
        run_of = {job: run for run, members, _ in runs for job in members}
        ran_by = {run: worker for run, _, worker in runs}
        found: list[tuple[int, int, object]] = []
        if run_of:
            cur.execute(self.runs.member_interruptions.format(ids=in_list("`id`", run_of)))
            found = [(int(i), int(n), run_of[int(i)]) for i, n in cur.fetchall()]
        again, dead = blame_interruptions(found, cap)
        text = f"dead: interrupted {cap} times; its worker keeps dying (killed, out of memory...)"
        for stmt, jobs, reason in (
            (self.runs.interrupted_retry, again, why),
            (self.runs.interrupted_dead, dead, text),
        ):
            by_run: dict[int, list[int]] = {}
            for job in jobs:
                by_run.setdefault(run_of[job], []).append(job)
            for run, ids in by_run.items():  # each job records the worker it was running on
                cur.execute(stmt.format(ids=in_list("`id`", ids)), (ran_by[run], reason))
        if dead:
            log.error(
                "%d job(s) of queue %s dead after %d interruptions",
                len(dead),
                self.queue,
                cap,
                extra={"event": "job.dead_interrupted", "source": self.src.name, "job_ids": dead},
            )
        cur.execute(self.runs.drop_runs.format(ids=in_list(RUN_KEY, (r for r, _, _ in runs))))
        return len(found), len(dead)

    def close(self) -> None:
        """Close this store's session (its lease keeper thread keeps the store itself alive)."""
        self.db.close()

    def reset_dispatched(self) -> int:
        """Every run of the queue goes (its jobs, pending, are found by the next claim's look behind
        the cursors), and jobs an older duecast left in flight become pending. Only when no
        dispatcher or worker runs."""
        with self.db.transaction() as cur:
            cur.execute(self.runs.jobs_in_runs, (self.queue,))
            jobs = int(_scalar(cur) or 0)
            cur.execute(self.runs.release, (self.queue,))
            return jobs + int(cur.execute(self.runs.release_legacy, (self.queue,)))

    # -- pruning and status --------------------------------------------------------------------------

    def prune(self, limit: int) -> int:
        """Delete done jobs older than retention_s and dead ones older than dead_retention_s."""
        pruned = 0
        queues = ",".join(["%s"] * len(self.jobs.queues))
        for state, keep_s in ((DONE, self.jobs.retention_s), (DEAD, self.jobs.dead_retention_s)):
            if state == DEAD and keep_s == 0:
                continue  # dead jobs kept forever
            with self.db.transaction() as cur:
                cur.execute(
                    self.sql.find_prunable.format(queues=queues),
                    (state, *self.jobs.queues, _us(keep_s), limit),
                )
                ids = [int(r[0]) for r in cur.fetchall()]
                if ids:
                    pruned += int(cur.execute(self.sql.prune.format(ids=in_list("`id`", ids)), (state,)))
        return pruned

    def status(self) -> SourceStatus:
        """Jobs by state. A run's jobs are pending on their rows; the runs say which are in flight."""
        with self.db.transaction() as cur:
            counts = {}
            for state in (IDLE, DONE, DEAD):
                cur.execute(self.sql.count_state, (state, self.queue, STATUS_COUNT_CAP))
                counts[state] = int(_scalar(cur) or 0)
            cur.execute(self.sql.count_due, (self.queue, STATUS_COUNT_CAP))
            due = int(_scalar(cur) or 0)
            cur.execute(self.sql.oldest_due, (self.queue,) * 10)
            row = cur.fetchone()
            cur.execute(self.runs.in_flight, (self.queue,))
            runs: Counter[int] = Counter({int(s): int(n) for s, n in cur.fetchall()})
        held = sum(runs.values())  # pending (a run given back), dispatched or running
        pending = max(0, counts[IDLE] - held)
        due = max(0, due - held)
        age = None if row is None or row[0] is None or due == 0 else float(row[0]) / 1e6
        detail = {
            "pending": pending,
            "due": due,
            "scheduled": max(0, pending - due),
            "dispatched": runs[DISPATCHED] + runs[IDLE],
            "running": runs[RUNNING],
            "done": counts[DONE],
            "dead": counts[DEAD],
        }
        return SourceStatus(due, held, age, unit="jobs", detail=detail)


def _whole(packed: list[list[Any]] | None) -> list[list[Any]]:
    """A claim's packed read, which a server limit must not cut short (it would stall the queue)."""
    if packed is None:
        raise StorageError(
            "a claim's packed read of due jobs was cut short by the server (max_allowed_packet); "
            "raise it, or lower jobs.claim_batch"
        )
    return packed
