"""Operator actions on the jobs table (`duecast jobs`): show, list, retry, replay, discard and cancel by
filter.

Runs shared.queries.jobs statements; a Filter renders its WHERE from fixed column names, values as
parameters. Bulk actions walk the matching ids in keyset pages, one short transaction per page.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from ...queries.job_runs import RunSQL, render_runs
from ...queries.jobs import JOB_COLUMNS, SHOW_COLUMNS, JobSQL, render_jobs
from ...queries.source import in_list
from ...settings import JobsSettings
from ...states import STATE_NAMES, State
from ..db import Database
from ..job_cancels import cancel_jobs
from ..leased.members import decode_members
from ..units import DuplicateKey, savepoint, translated

PAGE = 1000
STATES_BY_NAME = {name: state for state, name in STATE_NAMES.items()}


@dataclass(frozen=True)
class Filter:
    """Which jobs an action applies to; every field narrows it. `since`/`until` bound created_at,
    in the database's time zone (the zone NOW() uses)."""

    ids: list[int] = field(default_factory=list)
    states: list[State] = field(default_factory=list)
    queue: str | None = None
    task: str | None = None
    since: datetime | timedelta | None = None  # a timedelta: that long before NOW(6)
    until: datetime | timedelta | None = None

    def where(self) -> tuple[str, list[Any]]:
        parts: list[str] = ["1 = 1"]
        params: list[Any] = []
        if self.ids:
            parts.append(in_list("`id`", self.ids))
        if self.states:
            parts.append(f"`dc_state` IN ({', '.join(str(int(s)) for s in self.states)})")
        for column, value in (("queue", self.queue), ("task", self.task)):
            if value is not None:
                parts.append(f"`{column}` = %s")
                params.append(value)
        for op, bound in ((">=", self.since), ("<", self.until)):
            if isinstance(bound, timedelta):  # a time ago: from the database's clock, not ours
                parts.append(f"`created_at` {op} NOW(6) - INTERVAL %s MICROSECOND")
                params.append(round(bound.total_seconds() * 1_000_000))
            elif bound is not None:
                parts.append(f"`created_at` {op} %s")
                params.append(bound)
        return " AND ".join(parts), params

    def narrowed_to(self, allowed: list[State]) -> Filter:
        """This filter within `allowed` states (an action's own states, e.g. retry: dead only)."""
        states = [s for s in self.states if s in allowed] if self.states else allowed
        if self.states and not states:
            raise ValueError(f"this action applies to {', '.join(STATE_NAMES[s] for s in allowed)} jobs only")
        return Filter(self.ids, states, self.queue, self.task, self.since, self.until)


@dataclass(frozen=True)
class Outcome:
    matched: int  # jobs the filter selected in the action's states
    changed: int  # jobs the action applied to
    skipped_unique: int = 0  # revivals left alone: another active job holds their unique key
    in_flight: int = 0  # revivals left alone: cancelled while running, their run still holds them


class JobAdmin:
    def __init__(self, db: Database, jobs: JobsSettings) -> None:
        self.db = db
        self.sql: JobSQL = render_jobs(jobs.table)
        self.runs: RunSQL = render_runs(jobs.table, jobs.runs_table, jobs.cursors_table, JOB_COLUMNS)

    def find(self, flt: Filter, limit: int = 50, newest_first: bool = True) -> list[dict[str, Any]]:
        where, params = flt.where()
        stmt = self.sql.show.format(where=where, order="DESC" if newest_first else "ASC")
        with self.db.transaction() as cur:
            cur.execute(stmt, (*params, limit))
            return [dict(zip(SHOW_COLUMNS, row, strict=True)) for row in cur.fetchall()]

    def show(self, job_id: int) -> dict[str, Any] | None:
        """A job's columns. A pending job a run holds shows its run's state (dispatched or running),
        worker, start and lease, as the job's own row records them only once it finishes."""
        found = self.find(Filter(ids=[job_id]), limit=1)
        if not found:
            return None
        job = found[0]
        if job["dc_state"] == State.IDLE:
            with self.db.transaction() as cur:
                cur.execute(self.runs.all_runs)
                held = [r for r in cur.fetchall() if job_id in decode_members(r[-1])]
            if held:
                run, state, attempt, worker, started_at, lease_until, _ = held[0]
                if state != State.IDLE:
                    job.update(dc_state=state, worker=worker, started_at=started_at, lease_until=lease_until)
                job["run"] = f"{run} (attempt {attempt})"
        return job

    def revive(self, flt: Filter, progress: Callable[[int], None] = lambda _n: None) -> Outcome:
        """Done, dead or cancelled -> pending now, errors and interruptions reset (retry, replay)."""
        flt = flt.narrowed_to([State.DONE, State.DEAD, State.CANCELLED])
        states = ", ".join(str(int(s)) for s in flt.states)
        matched = changed = skipped = in_flight = 0
        for page in self._pages(flt):
            matched += len(page)
            with self.db.transaction() as cur:
                # A job cancelled while it ran stays a member of its run until that run's finish
                # (stale) takes it out: pending again before then, that finish would apply to it.
                # No claim adds a job that is not pending to a run, so a plain read is enough.
                cur.execute(self.runs.all_members)
                held = {job for (members,) in cur.fetchall() for job in decode_members(members)}
                ids = [i for i in page if i not in held]
                in_flight += len(page) - len(ids)
                if not ids:
                    progress(len(page))
                    continue
                changed += int(cur.execute(self.sql.revive.format(ids=in_list("`id`", ids), states=states)))
                cur.execute(self.sql.unique_among.format(ids=in_list("`id`", ids)))
                unique = [int(r[0]) for r in cur.fetchall()]
                for job_id in unique:  # one by one: each takes its key back, or stays if it is taken
                    try:
                        with translated(), savepoint(cur, "dc_revive"):
                            changed += int(
                                cur.execute(self.sql.revive_unique.format(states=states), (job_id,))
                            )
                    except DuplicateKey:
                        skipped += 1
            progress(len(page))
        return Outcome(matched, changed, skipped, in_flight)

    def discard(self, flt: Filter, progress: Callable[[int], None] = lambda _n: None) -> Outcome:
        """Delete jobs for good; never one in flight: a pending job a run holds is left alone. The
        queues' cursors are locked first, so no claim puts one of them in a run meanwhile."""
        flt = flt.narrowed_to([State.IDLE, State.DONE, State.DEAD, State.CANCELLED])
        matched = changed = 0
        for ids in self._pages(flt):
            matched += len(ids)
            with self.db.transaction() as cur:
                cur.execute(self.runs.lock_all_cursors)
                cur.execute(self.runs.all_members)
                held = {job for (members,) in cur.fetchall() for job in decode_members(members)}
                free = [i for i in ids if i not in held]
                if free:
                    discard = self.sql.discard.format(ids=in_list("`id`", free))
                    changed += int(cur.execute(discard, (len(free),)))
            progress(len(ids))
        return Outcome(matched, changed)

    def cancel(self, flt: Filter, progress: Callable[[int], None] = lambda _n: None) -> Outcome:
        """Pending jobs -> cancelled, final (kept for jobs.dead_retention_s), in flight or not: one a
        run holds is never started, or its running task's finish is stale (docs/jobs.md, "Cancel")."""
        flt = flt.narrowed_to([State.IDLE])
        matched = changed = 0
        for ids in self._pages(flt):
            matched += len(ids)
            changed += cancel_jobs(self.db, self.sql, ids)
            progress(len(ids))
        return Outcome(matched, changed)

    def count(self, flt: Filter) -> int:
        return sum(len(ids) for ids in self._pages(flt))

    def _pages(self, flt: Filter) -> Iterator[list[int]]:
        where, params = flt.where()
        stmt = self.sql.select_ids.format(where=where)
        last = 0
        while True:
            with self.db.transaction() as cur:
                cur.execute(stmt, (*params, last, PAGE))
                ids = [int(r[0]) for r in cur.fetchall()]
            if not ids:
                return
            yield ids
            last = ids[-1]
