"""The fault tier's view of job runs: a job queue's jobs are dispatched, started and leased as rows of
`<jobs.table>_runs` (shared/queries/job_runs.py), so "the job is running" is a fact about its run.

Plain SQL over an autocommit cursor, for arranging and asserting; the product never reads this.
"""

from __future__ import annotations

from dataclasses import dataclass

import pymysql

from duecast.shared.queries.job_runs import RUN_ID_BASE
from duecast.shared.settings import JobsSettings
from duecast.shared.states import State
from duecast.shared.storage.leased.members import decode_members


@dataclass(frozen=True)
class Run:
    id: int
    state: int
    attempt: int
    members: frozenset[int]
    worker: str | None


def runs(sql: pymysql.cursors.Cursor, jobs: JobsSettings, state: State | None = None) -> list[Run]:
    """Every run of the jobs table (in `state`, if given), in id order."""
    where = "" if state is None else f" WHERE dc_state = {int(state)}"
    sql.execute(
        f"SELECT id, dc_state, dc_attempt, members, worker FROM `{jobs.runs_table}`{where} ORDER BY id"
    )
    return [
        Run(int(i), int(s), int(a), frozenset(decode_members(m)), None if w is None else str(w))
        for i, s, a, m, w in sql.fetchall()
    ]


def running_jobs(sql: pymysql.cursors.Cursor, jobs: JobsSettings) -> set[int]:
    """The jobs a worker is running now: the members of the RUNNING runs."""
    return {job for run in runs(sql, jobs, State.RUNNING) for job in run.members}


def run_of(sql: pymysql.cursors.Cursor, jobs: JobsSettings, job: int) -> Run | None:
    """The run holding `job` (dispatched or running), or None: no run holds it."""
    return next((r for r in runs(sql, jobs) if job in r.members), None)


def runs_made(sql: pymysql.cursors.Cursor, jobs: JobsSettings) -> int:
    """How many runs were ever inserted: the runs table's AUTO_INCREMENT, past RUN_ID_BASE (a claim
    rolled back may have used ids up too: this is an upper bound on the runs that committed)."""
    sql.execute(f"SELECT COALESCE(MAX(id) + 1, 0) FROM `{jobs.runs_table}`")
    (top,) = sql.fetchone() or (0,)
    sql.execute(
        "SELECT AUTO_INCREMENT FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() "
        "AND TABLE_NAME = %s",
        (jobs.runs_table,),
    )
    (auto,) = sql.fetchone() or (RUN_ID_BASE,)
    return max(int(top), int(auto)) - RUN_ID_BASE


def expire_runs(sql: pymysql.cursors.Cursor, jobs: JobsSettings, seconds: float = 1.0) -> int:
    """Back-date the leases of every RUNNING run to `seconds` ago; returns how many."""
    sql.execute(
        f"UPDATE `{jobs.runs_table}` SET lease_until = NOW(6) - INTERVAL %s MICROSECOND WHERE dc_state = %s",
        (round(seconds * 1e6), int(State.RUNNING)),
    )
    return int(sql.rowcount)


def drop_job_tables(sql: pymysql.cursors.Cursor, jobs: JobsSettings) -> None:
    """The jobs table and every table made beside it (schedules, runs, cursors)."""
    tables = (jobs.table, jobs.schedules_table, jobs.runs_table, jobs.cursors_table)
    sql.execute("DROP TABLE IF EXISTS " + ", ".join(f"`{t}`" for t in tables))
