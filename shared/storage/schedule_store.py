"""Materialises recurring schedules into jobs: one transaction per schedule and tick, under its row lock.

Runs shared.queries.jobs.ScheduleSQL; the decision of which fire times to run is shared.schedules.due_runs,
and the job each run enqueues is checked by the caller (dispatcher/recurring.py, with job_input.encode).
"""

from __future__ import annotations

import logging
from dataclasses import replace
from datetime import UTC, datetime

from ..queries.jobs import render_schedules
from ..schedules import Trigger, due_runs
from ..settings import JobsSettings, ScheduleSettings
from .db import Database
from .job_writer import JobRow, JobWriter

log = logging.getLogger("duecast.schedules")

ON_TIME_GRACE_S = 5.0  # a fire time this close to now is on time, not missed (see due_runs)


class ScheduleStore:
    def __init__(self, db: Database, jobs: JobsSettings, enqueuer: JobWriter) -> None:
        self.db = db
        self.jobs = jobs
        self.enqueuer = enqueuer
        self.sql = render_schedules(jobs.schedules_table)

    def fire_due(self, schedule: ScheduleSettings, trigger: Trigger, job: JobRow) -> int:
        """Enqueue this schedule's due runs of `job`, each keyed by (schedule, fire time); returns
        how many were written. Two dispatchers serialise on the schedule's row, and the unique
        (schedule, scheduled_for) index makes a repeat of one fire time a no-op in any case."""
        with self.db.transaction() as cur:
            cur.execute(self.sql.ensure, (schedule.name,))
            cur.execute(self.sql.lock, (schedule.name,))
            row = cur.fetchone()
            assert row is not None  # ensured just above, in this transaction
            last, now = _aware(row[0]), _aware(row[1])
            due = due_runs(
                trigger,
                last=last,
                now=now,
                missed=schedule.missed,
                backfill_max=self.jobs.schedule_backfill_max,
                grace_s=ON_TIME_GRACE_S,
            )
            if due.runs:
                rows = [
                    replace(job, schedule=schedule.name, scheduled_for=t.replace(tzinfo=None))
                    for t in due.runs
                ]
                self.enqueuer.write(cur, rows, "keep")
            if due.last != last:
                cur.execute(self.sql.advance, (due.last.replace(tzinfo=None), len(due.runs), schedule.name))
        if due.missed:
            log.warning(
                "schedule %s: %d fire time(s) missed while no dispatcher ran (%s policy)",
                schedule.name,
                due.missed,
                schedule.missed,
            )
        return len(due.runs)


def _aware(value: object) -> datetime:
    if not isinstance(value, datetime):
        raise TypeError(f"expected a DATETIME, got {value!r}")
    return value.replace(tzinfo=UTC)
