"""The read-only SQL of `duecast status` and `duecast web` beyond each store's status(): who runs jobs
now, and the recurring schedules' rows. Each statement is bounded by an index prefix or a LIMIT.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..identifiers import quote
from ..states import State

RUNNING = int(State.RUNNING)
MAX_ROWS = 1000  # a dashboard lists at most this many workers or schedules


@dataclass(frozen=True)
class DashboardSQL:
    running_by_worker: str
    schedules: str
    now: str


def render_dashboard(runs_table: str, schedules_table: str) -> DashboardSQL:
    runs, schedules = quote(runs_table), quote(schedules_table)
    return DashboardSQL(
        # Jobs running now, per worker process (host:pid), from their runs (a run's jobs keep
        # their rows untouched while they run): a small table, one row per run in flight. Seconds
        # since the latest start, and whether every lease is still live (an expired one means the
        # worker died and the sweeper will take its runs back).
        running_by_worker=(
            "SELECT `worker`, SUM(`jobs`), TIMESTAMPDIFF(MICROSECOND, MAX(`started_at`), NOW(6)), "
            "MIN(`lease_until` > NOW(6)), GROUP_CONCAT(DISTINCT `queue` ORDER BY `queue`) "
            f"FROM {runs} WHERE `dc_state` = {RUNNING} "
            f"GROUP BY `worker` ORDER BY `worker` LIMIT {MAX_ROWS}"
        ),
        # Every schedule's last fire time (UTC, as the recurring duty writes it) and run count.
        schedules=f"SELECT `name`, `last_run_at`, `runs` FROM {schedules} ORDER BY `name` LIMIT {MAX_ROWS}",
        # The database's clock in UTC, which schedules are computed against.
        now="SELECT UTC_TIMESTAMP(6)",
    )
