"""SQL of limited tasks' claims (`[jobs.task_limits]`): a limited task's due jobs are left out of its
queue's claim and claimed by these statements into runs of their own, which name the task.
Rendered only where task limits are set: elsewhere the queue's claim is byte for byte as before."""

from __future__ import annotations

from dataclasses import dataclass

from ..identifiers import quote
from .jobs import DISPATCHED, IDLE, PRIORITIES


@dataclass(frozen=True)
class TaskRunSQL:
    read_due: str
    held: str
    claim_idle: str
    insert_run: str
    first_pending: str
    queue_claim_idle: str
    queue_jobs_in_runs: str


def _others(tasks: int) -> str:
    """The queue's own runs: those of no limited task (args: the limited tasks' names)."""
    return " AND (`task` IS NULL OR `task` NOT IN (" + ", ".join(["%s"] * tasks) + "))"


def render_task_runs(jobs_table: str, runs_table: str, limited_tasks: int) -> TaskRunSQL:
    j, r, others = quote(jobs_table), quote(runs_table), _others(limited_tasks)
    # One range of dc_task per priority: a task's jobs due now, never its later ones in between.
    due = "(" + " OR ".join(f"(`priority` = {p} AND `run_at` <= NOW(6))" for p in PRIORITIES) + ")"
    return TaskRunSQL(
        # A task's due pending jobs of one queue in claim order (args: task, queue, limit); the
        # members of its live runs among them are dropped by the caller (`held`).
        read_due=(
            "SELECT COUNT(*), JSON_ARRAYAGG(JSON_ARRAY(`id`, `priority`, `at`, `interruptions`)) FROM ("
            f"SELECT `id`, `priority`, CAST(`run_at` AS CHAR) AS `at`, `interruptions` FROM {j} "
            "FORCE INDEX (`dc_task`) "
            f"WHERE `dc_state` = {IDLE} AND `task` = %s AND `queue` = %s AND {due} "
            "ORDER BY `priority`, `run_at`, `id` LIMIT %s) AS `due`"
        ),
        # The runs that may hold its jobs (args: queue, task): its own, and the queue's others (a
        # run made before the limit was set may hold some; read so no job is ever in two runs).
        held=f"SELECT `task`, `members` FROM {r} WHERE `queue` = %s AND (`task` = %s OR `task` IS NULL)",
        # Its runs made pending again (entry lost, worker died before its start), first (args:
        # task, queue, runs).
        claim_idle=(
            f"SELECT `id`, `dc_attempt`, `jobs` FROM {r} FORCE INDEX (`dc_task`) WHERE `task` = %s "
            f"AND `dc_state` = {IDLE} AND `queue` = %s ORDER BY `priority`, `id` LIMIT %s "
            "FOR UPDATE SKIP LOCKED"
        ),
        insert_run=(
            f"INSERT INTO {r} (`queue`, `priority`, `suspects`, `jobs`, `members`, `task`, `dc_state`, "
            f"`dc_attempt`, `dc_dispatched_at`) VALUES (%s, %s, %s, %s, %s, %s, {DISPATCHED}, 1, NOW(6))"
        ),
        # Under max_running, the pending run its next claim takes first (args: task, queue): a run
        # given back is claimed whole, so it waits until it fits (shared.storage.limits).
        first_pending=(
            f"SELECT `jobs` FROM {r} FORCE INDEX (`dc_task`) WHERE `task` = %s AND `dc_state` = {IDLE} "
            "AND `queue` = %s ORDER BY `priority`, `id` LIMIT 1"
        ),
        # The queue's claim, where tasks are limited: its pending runs, and the jobs its runs hold
        # (its look behind the cursors), leave out the limited tasks' runs (args: queue, tasks...).
        queue_claim_idle=(
            f"SELECT `id`, `dc_attempt`, `jobs` FROM {r} FORCE INDEX (`dc_runs`) WHERE `dc_state` = {IDLE} "
            f"AND `queue` = %s{others} ORDER BY `priority`, `id` LIMIT %s FOR UPDATE SKIP LOCKED"
        ),
        queue_jobs_in_runs=f"SELECT COALESCE(SUM(`jobs`), 0) FROM {r} WHERE `queue` = %s{others}",
    )
