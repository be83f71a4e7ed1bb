"""Read-only views for `duecast status` and `duecast web`: the workers running jobs now, and recurring
schedules with their last and next fire times. Runs shared.queries.dashboard; never writes.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from ...queries.dashboard import DashboardSQL, render_dashboard
from ...schedules import build_trigger
from ...settings import JobsSettings, ScheduleSettings
from ..db import Database


@dataclass(frozen=True)
class WorkerRow:
    worker: str  # host:pid, as the jobs' `worker` column and the JSON logs' `process` name it
    running: int  # jobs it runs now
    last_start_age_s: float | None  # since it started the newest of them
    leases_live: bool  # False: a lease ran out (the process is gone or stalled)
    queues: tuple[str, ...]


@dataclass(frozen=True)
class ScheduleRow:
    name: str
    configured: ScheduleSettings | None  # None: in the table, but no longer in settings or the app
    last_run_at: datetime | None  # UTC; None before its first fire
    runs: int
    next_run_at: datetime | None  # UTC, by the database's clock

    @property
    def trigger(self) -> str:
        s = self.configured
        if s is None:
            return "-"
        if s.every_s is not None:
            return f"every {s.every_s:g} s"
        return f"cron {s.cron} ({s.timezone})"


class DashboardStore:
    def __init__(self, db: Database, jobs: JobsSettings) -> None:
        self.db = db
        self.jobs = jobs
        self.sql: DashboardSQL = render_dashboard(jobs.runs_table, jobs.schedules_table)

    def workers(self) -> list[WorkerRow]:
        """Worker processes that run jobs now. Workers on re-scan sources leave no row to see them by;
        a heartbeat registry (reliability work) will list every live worker."""
        if not self.jobs.enabled:
            return []
        with self.db.transaction() as cur:
            cur.execute(self.sql.running_by_worker)
            found = cur.fetchall()
        return [
            WorkerRow(
                worker=str(worker or "?"),
                running=int(n),
                last_start_age_s=None if age is None else max(0.0, float(age) / 1e6),
                leases_live=bool(live),
                queues=tuple(str(queues or "").split(",")) if queues else (),
            )
            for worker, n, age, live, queues in found
        ]

    def schedules(self, configured: list[ScheduleSettings]) -> list[ScheduleRow]:
        """Configured schedules first (settings order), then rows left by schedules since removed."""
        if not self.jobs.enabled:
            return []
        with self.db.transaction() as cur:
            cur.execute(self.sql.now)
            now_row = cur.fetchone()
            cur.execute(self.sql.schedules)
            rows = {str(name): (_utc(last), int(runs)) for name, last, runs in cur.fetchall()}
        now = _utc(now_row[0] if now_row else None) or datetime.now(UTC)
        out = []
        for s in configured:
            last, runs = rows.pop(s.name, (None, 0))
            # After its last fire time; a schedule never fired starts from now (it never backfills).
            # A time in the past means the recurring duty is behind (no dispatcher runs).
            next_at = build_trigger(s).get_next_fire_time(last, now)
            out.append(ScheduleRow(s.name, s, last, runs, next_at.astimezone(UTC) if next_at else None))
        out.extend(ScheduleRow(name, None, last, runs, None) for name, (last, runs) in sorted(rows.items()))
        return out


def _utc(value: object) -> datetime | None:
    return value.replace(tzinfo=UTC) if isinstance(value, datetime) else None
