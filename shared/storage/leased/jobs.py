"""A job queue's store: what only a queue decides, on the leased lifecycle (store.py) in runs
(run_units.py): its claim, backoff, pruning and status by state.

A run is up to jobs.run_size due jobs of one queue and priority, read past that priority's cursor in
claim order; one row of the runs table and one ready-list entry stand for all of them, and their own
rows are written once, when each finishes (docs/architecture.md, "Job runs"). The SQL is in
shared/queries/jobs.py and job_runs.py.
"""

from __future__ import annotations

import logging
import random
import time
from collections import Counter
from collections.abc import Callable, Set
from datetime import datetime
from typing import Any

from ...acks import Row
from ...entries import Entry
from ...policy import (
    dead_after_failure,
    form_runs,
    look_behind_every_s,
    look_behind_paused_every_s,
    retry_delay_s,
)
from ...queries.job_runs import RUN_ID_BASE, RunSQL, cursor_rows, render_runs, skip_tasks
from ...queries.jobs import (
    CANCELLED,
    DEAD,
    DISPATCHED,
    DONE,
    IDLE,
    JOB_COLUMNS,
    RUNNING,
    JobSQL,
    render_jobs,
)
from ...queries.key_runs import render_key_runs, unkeyed
from ...queries.source import in_list
from ...queries.task_runs import render_task_runs
from ...settings import JobsSettings, MySQLSettings, SourceSettings
from ..db import Database
from ..packed import read_packed
from ..schema import check_jobs_table
from ..source_store import STATUS_COUNT_CAP, SourceStatus, _scalar, _us
from ..units import Cursor, StorageError, claiming
from .key_claims import KeyClaim, KeyClaims
from .members import decode_members, encode_members
from .run_units import RunUnits
from .runs import RUN_KEY
from .scope import Naming
from .task_claims import TaskClaim, TaskClaims

log = logging.getLogger("duecast.jobs")
BEHIND_LIMIT = 1_000_000  # the jobs a look behind reads at most: the runs in flight, and those left
Key = tuple[datetime | str, int]  # a cursor: (run_at, id)


class JobStore(RunUnits):
    """One queue of the jobs table, dispatched in runs."""

    def __init__(self, db: Database, src: SourceSettings, jobs: JobsSettings, mysql: MySQLSettings) -> None:
        self.jobs = jobs
        self.queue = src.name.split(".", 1)[1]
        self.sql: JobSQL = render_jobs(jobs.table)
        self.runs: RunSQL = render_runs(jobs.table, jobs.runs_table, jobs.cursors_table, JOB_COLUMNS)
        naming = Naming("id", "job", f"queue {self.queue}", "a job's handler", "task", log)
        super().__init__(
            db,
            src,
            naming,
            mysql,
            lease_s=jobs.lease_s,
            max_interruptions=jobs.max_interruptions,
            what=f"job runs of {src.name}",
            max_delay_s=jobs.max_delay_s,
        )
        self.rows_per_entry = jobs.run_size  # a worker pops entries for this many jobs each
        self.claim_weight = jobs.run_size  # claim_batch and high_water count jobs
        kept = jobs.retention_s > 0
        self._done = self.runs.finish_done if kept else self.runs.finish_delete
        self._done_args = (self.worker,) if kept else None
        self._result_max = jobs.max_result_bytes if kept else -1
        self._rng = random.Random()
        self._cursors_made = False
        self.claimed_rows = 0  # jobs in the runs the last claim made or dispatched again
        self._behind_at = 0.0  # time.monotonic() of the last look behind the cursors
        self._behind_every_s = 0.0  # shared.policy.look_behind_every_s of the jobs in runs then
        self._skipped: tuple[str, ...] = ()  # the paused tasks the last claim left out
        # The job tasks an operator paused (PauseStore.paused_tasks): no I/O, read per claim/start.
        self.paused_tasks: Callable[[], Set[str]] = frozenset
        # `[jobs.task_limits]`: these tasks' jobs are left out of the queue's claim and claimed by
        # their own (task_claims.py), up to what the dispatcher's Limiter grants each per claim.
        self.limited_tasks = tuple(sorted(jobs.task_limits))
        self.task_grants: dict[str, int] = {}  # set before a claim, used up by it
        self.task_claimed: dict[str, int] = {}  # jobs each limited task's share of the last claim took
        task_sql = render_task_runs(jobs.table, jobs.runs_table, len(self.limited_tasks))
        self.tasks = TaskClaims(self.queue, self.runs, task_sql, jobs.run_size) if jobs.task_limits else None
        # `[jobs.key_limits.<queue>]`: its keyed jobs are claimed key by key (key_claims.py), its
        # others by the queue's own claim, scoped to no key (`claiming`); the two go first in turn.
        keyed = jobs.key_limits.get(self.queue)
        key_sql = render_key_runs(jobs.table, jobs.runs_table)
        self.keys = (
            None if keyed is None else KeyClaims(self.queue, keyed.max_running_per_key, self.runs, key_sql)
        )
        self.claiming: RunSQL = self.runs if self.keys is None else unkeyed(self.runs)
        self._keys_first = True

    def verify(self) -> None:
        with self.db.transaction() as cur:
            check_jobs_table(cur, self.jobs)

    # -- claim ---------------------------------------------------------------------------------

    def claim_due(self, limit: int) -> list[Entry]:
        """Up to `limit` due jobs, in runs: each limited task's share (task_grants), then pending runs,
        then jobs no run holds behind the cursors (shared.policy.look_behind_every_s), then jobs past
        the cursors in claim order. Each run is committed DISPATCHED under a new attempt on return;
        no job row is written. Jobs of paused and limited tasks are left out of the queue's reads
        (the cursors pass them); once resumed, the next claim looks behind the cursors, where they are.
        In a key-limited queue its keys' share (key_claims.py) goes before the rest one claim, after
        it the next, and the rest reads the jobs of no key only (`claiming`)."""
        if not self._cursors_made:
            values, args = cursor_rows(self.queue)
            with self.db.transaction() as cur:
                cur.execute(self.runs.ensure_cursors.format(rows=values), args)
            self._cursors_made = True
        paused = self.paused_tasks()
        skip = tuple(sorted({*paused, *self.limited_tasks}))
        if set(self._skipped) - set(skip):
            self._behind_at = -self._behind_every_s  # a task resumed: its jobs are behind the cursors
        self._skipped = skip
        grants = {t: n for t, n in self.task_grants.items() if t not in paused}
        self.task_grants, self.task_claimed = {}, {}
        entries: list[Entry] = []  # filled in place: a COMMIT cut off names them (CommitUnknown)
        with claiming(entries), self.db.transaction() as cur:
            cur.execute(self.runs.lock_cursors, (self.queue,))
            cursors: dict[int, Key] = {int(p): (at, int(i)) for p, at, i in cur.fetchall()}
            tasks, left = self._claim_tasks(cur, grants, limit, entries)
            keys_first, self._keys_first = self._keys_first, not self._keys_first
            keys, left = self._claim_keys(cur, left, entries) if keys_first else (KeyClaim(), left)
            pending, left = self._claim_pending(cur, left) if left > 0 else ([], left)
            entries += pending
            now = time.monotonic()
            if left > 0 and now - self._behind_at >= self._behind_every_s:
                self._behind_at = now
                behind, left = self._claim_behind(cur, cursors, left)
                entries += behind
            else:
                behind = []
            ahead: list[Entry] = []
            if left > 0:
                ahead, took = self._claim_ahead(cur, cursors, left)
                entries += ahead
                left -= took
            if not keys_first:
                keys, left = self._claim_keys(cur, left, entries)
            # Pending runs (given back, requeued) and jobs behind the cursors (retried, interrupted)
            # came back: ahead of the backlog (Redelivery.push_claimed).
            back = [*pending, *tasks.back, *keys.back, *behind]
            self.returning = len(back)
            entries[:] = [*back, *ahead, *tasks.fresh, *keys.fresh]
        self.claimed_rows = limit - left
        return entries

    def _claim_tasks(
        self, cur: Cursor, grants: dict[str, int], limit: int, entries: list[Entry]
    ) -> tuple[TaskClaim, int]:
        """Each limited task's share, within the claim's `limit`: its runs' entries (added to
        `entries` at once, for CommitUnknown), and what is left of `limit`."""
        every = TaskClaim()
        if self.tasks is None:
            return every, limit
        for task, granted in sorted(grants.items()):
            got = self.tasks.claim(cur, task, min(granted, limit), self._make_runs)
            entries += [*got.back, *got.fresh]
            every.back += got.back
            every.fresh += got.fresh
            self.task_claimed[task] = got.jobs
            limit -= got.jobs
        return every, limit

    def _claim_keys(self, cur: Cursor, limit: int, entries: list[Entry]) -> tuple[KeyClaim, int]:
        """A key-limited queue's keys' share (key_claims.py), added to `entries` at once."""
        if self.keys is None or limit <= 0:
            return KeyClaim(), limit
        got = self.keys.claim(cur, limit, self._skipped, self._make_runs)
        entries += [*got.back, *got.fresh]
        return got, limit - got.jobs

    def _claim_pending(self, cur: Cursor, limit: int) -> tuple[list[Entry], int]:
        runs = max(1, limit // self.jobs.run_size)
        if self.tasks is None:
            cur.execute(self.claiming.claim_idle, (self.queue, runs))
        else:  # its limited tasks' runs are theirs to claim
            cur.execute(self.tasks.sql.queue_claim_idle, (self.queue, *self.limited_tasks, runs))
        found = [(int(i), int(a), int(n)) for i, a, n in cur.fetchall()]
        if not found:
            return [], limit
        cur.execute(self.runs.mark_dispatched.format(ids=in_list(RUN_KEY, (i for i, _, _ in found))))
        return [Entry(i, a + 1) for i, a, _ in found], limit - sum(n for _, _, n in found)

    def _claim_behind(self, cur: Cursor, cursors: dict[int, Key], limit: int) -> tuple[list[Entry], int]:
        """Due jobs at or behind their cursor that no run holds. The runs are read first: a run's
        member that finishes between the two reads has left pending (deleted, done, dead or due
        later), so the second read cannot take it for one no run holds."""
        if self.tasks is None:
            cur.execute(self.claiming.jobs_in_runs, (self.queue,))
        else:  # the jobs of its own runs: the count below leaves out its limited tasks' jobs
            cur.execute(self.tasks.sql.queue_jobs_in_runs, (self.queue, *self.limited_tasks))
        held_count = int(_scalar(cur) or 0)
        cursor_args = self._cursor_args(cursors)
        skip = self._skipped
        began = time.monotonic()
        cur.execute(skip_tasks(self.claiming.count_behind, len(skip)), (self.queue, *skip, *cursor_args))
        self._behind_every_s = look_behind_every_s(held_count)
        if skip:
            self._behind_every_s = look_behind_paused_every_s(self._behind_every_s, time.monotonic() - began)
        if int(_scalar(cur) or 0) <= held_count:
            return [], limit  # every due job behind the cursors is a run's (the usual case)
        cur.execute(self.runs.live_members, (self.queue,))
        held: set[int] = set()
        for (members,) in cur.fetchall():
            held.update(decode_members(members))
        args = (self.queue, *skip, *cursor_args, BEHIND_LIMIT)
        read = skip_tasks(self.claiming.read_behind, len(skip))
        packed = _whole(read_packed(cur, read, args, what="jobs behind the cursors"))
        left = [(int(i), int(p), int(n)) for i, p, n in packed if int(i) not in held][:limit]
        if left:
            log.info(
                "%d due jobs of queue %s were behind the dispatch cursor (committed late, or enqueued "
                "with a past run_at); dispatching them now",
                len(left),
                self.queue,
                extra={"event": "job.behind_cursor", "source": self.src.name, "count": len(left)},
            )
        return self._make_runs(cur, left, None), limit - len(left)

    def _claim_ahead(self, cur: Cursor, cursors: dict[int, Key], limit: int) -> tuple[list[Entry], int]:
        skip = self._skipped
        args = (self.queue, *skip, *self._cursor_args(cursors), limit)
        read = skip_tasks(self.claiming.read_ahead, len(skip))
        packed = _whole(read_packed(cur, read, args, what="due jobs"))
        if not packed:
            return [], 0
        rows = sorted((int(p), str(at), int(i), int(n)) for p, at, i, n in packed)  # claim order
        last: dict[int, tuple[str, int]] = {}
        for p, at, i, _ in rows:
            last[p] = (at, i)  # the last of each priority
        for p, (at, i) in last.items():
            cur.execute(self.runs.advance_cursor, (at, i, self.queue, p))
        return self._make_runs(cur, [(i, p, n) for p, _, i, n in rows], None), len(rows)

    def _make_runs(self, cur: Cursor, jobs: list[tuple[int, int, int]], task: str | None) -> list[Entry]:
        """(id, priority, interruptions) of due jobs -> runs, one per priority and group
        (shared.policy.form_runs), inserted DISPATCHED under attempt 1; a limited task's name its
        task, a key's its key (`task`: the task or the key; the two limits are never both set)."""
        by_priority: dict[int, list[tuple[int, int]]] = {}
        for i, p, n in jobs:
            by_priority.setdefault(p, []).append((i, n))
        entries = []
        for p, members in sorted(by_priority.items()):
            counts = [n for _, n in members]
            for group in form_runs(counts, self.jobs.run_size, self.max_interruptions):
                ids = [members[k][0] for k in group]
                suspects = max(counts[k] for k in group)
                row = (self.queue, p, suspects, len(ids), encode_members(ids))
                if task is not None and self.keys is not None:
                    cur.execute(self.keys.sql.insert_run, (*row, task))
                elif task is not None and self.tasks is not None:
                    cur.execute(self.tasks.sql.insert_run, (*row, task))
                else:
                    cur.execute(self.runs.insert_run, row)
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

    # -- what a job queue decides -------------------------------------------------------------

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

    def _requeue_older(self, visibility_timeout_s: float) -> int:
        """Jobs an older duecast left dispatched or running on their own rows -> pending."""
        with self.db.transaction() as cur:
            return int(cur.execute(self.runs.requeue_legacy, (self.queue, _us(visibility_timeout_s))))

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
        """Delete done jobs older than retention_s, and dead and cancelled ones older than
        dead_retention_s."""
        pruned = 0
        queues = ",".join(["%s"] * len(self.jobs.queues))
        dead_s = self.jobs.dead_retention_s
        for state, keep_s in ((DONE, self.jobs.retention_s), (DEAD, dead_s), (CANCELLED, dead_s)):
            if state != DONE and keep_s == 0:
                continue  # dead and cancelled jobs kept forever
            with self.db.transaction() as cur:
                cur.execute(
                    self.sql.find_prunable.format(queues=queues),
                    (state, *self.jobs.queues, _us(keep_s), limit),
                )
                ids = [int(r[0]) for r in cur.fetchall()]
                if ids:
                    prune = self.sql.prune.format(ids=in_list("`id`", ids))
                    pruned += int(cur.execute(prune, (state, len(ids))))
        return pruned

    def status(self) -> SourceStatus:
        """Jobs by state. A run's jobs are pending on their rows; the runs say which are in flight."""
        with self.db.transaction() as cur:
            counts = {}
            for state in (IDLE, DONE, DEAD, CANCELLED):
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
            "cancelled": counts[CANCELLED],
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
