"""`duecast migrate`: create the database and jobs table, add dispatch columns to each source.

Prints or applies; every step is idempotent and checked against information_schema first.
"""

from __future__ import annotations

from collections.abc import Callable

from ...identifiers import quote
from ...queries.limits import limits_table_ddl
from ...queries.pauses import PAUSES_DDL, PAUSES_TABLE
from ...queries.ranges import ranges_table, ranges_table_ddl
from ...settings import Settings, SourceSettings
from ..db import connect
from ..schema import (
    check_business_columns,
    cursors_table_ddl,
    describe,
    index_columns,
    jobs_migration,
    jobs_table_ddl,
    leases_table_ddl,
    runs_migration,
    runs_table_ddl,
    schedules_table_ddl,
    source_migration,
    workers_migration,
    workers_table_ddl,
)
from ..topic_schema import topic_steps
from ..units import Cursor, StorageError, translated

_UNKNOWN_DATABASE = 1049


def plan(settings: Settings) -> list[str]:
    """The statements `migrate` would run now, in order (empty when up to date)."""
    steps: list[str] = []
    try:
        with translated():
            conn = connect(settings.mysql)
    except StorageError as exc:
        if exc.code != _UNKNOWN_DATABASE:
            raise
        steps.append(f"CREATE DATABASE IF NOT EXISTS {quote(settings.mysql.database)} CHARACTER SET utf8mb4")
        steps.append(leases_table_ddl(settings.dispatcher.leases_table))
        steps.append(workers_table_ddl(settings.worker.registry_table))
        steps.append(limits_table_ddl(settings.dispatcher.limits_table))
        steps.append(PAUSES_DDL)
        if settings.jobs.enabled:
            steps += [jobs_table_ddl(settings.jobs), schedules_table_ddl(settings.jobs)]
            steps += [runs_table_ddl(settings.jobs), cursors_table_ddl(settings.jobs)]
        steps += topic_steps(None, settings.topics)
        return steps  # sources live in a database that does not exist yet: nothing to alter
    try:
        with conn.cursor() as cur:
            if not describe(cur, settings.dispatcher.leases_table).columns:
                steps.append(leases_table_ddl(settings.dispatcher.leases_table))
            if not describe(cur, settings.dispatcher.limits_table).columns:
                steps.append(limits_table_ddl(settings.dispatcher.limits_table))
            workers = describe(cur, settings.worker.registry_table)
            if not workers.columns:
                steps.append(workers_table_ddl(settings.worker.registry_table))
            else:
                steps.extend(workers_migration(settings.worker.registry_table, workers))
            if not describe(cur, PAUSES_TABLE).columns:
                steps.append(PAUSES_DDL)
            if settings.jobs.enabled:
                steps.extend(_jobs_steps(cur, settings))
            steps.extend(topic_steps(cur, settings.topics))
            for src in settings.sources:
                steps.extend(_source_steps(cur, src))
    finally:
        conn.close()
    return steps


def _jobs_steps(cur: Cursor, settings: Settings) -> list[str]:
    jobs = settings.jobs
    steps = []
    info = describe(cur, jobs.table)
    if not info.columns:
        steps.append(jobs_table_ddl(jobs))
    else:
        steps.extend(jobs_migration(jobs, info, index_columns(cur, jobs.table)))
    if not describe(cur, jobs.schedules_table).columns:
        steps.append(schedules_table_ddl(jobs))
    runs = describe(cur, jobs.runs_table)
    if not runs.columns:
        steps.append(runs_table_ddl(jobs))
    else:
        steps.extend(runs_migration(jobs, runs))
    if not describe(cur, jobs.cursors_table).columns:
        steps.append(cursors_table_ddl(jobs))
    return steps


def _source_steps(cur: Cursor, src: SourceSettings) -> list[str]:
    business = describe(cur, src.table)
    if src.mode == "rows":
        return source_migration(src, business)
    # Range mode leaves the business table's schema alone: it only needs its own ranges table.
    check_business_columns(src, business)
    return [] if describe(cur, ranges_table(src)).columns else [ranges_table_ddl(src)]


def apply(settings: Settings, on_step: Callable[[str], None] = lambda _s: None) -> list[str]:
    """Run the plan; returns the statements run. DDL commits implicitly in MySQL."""
    steps = plan(settings)
    if not steps:
        return steps
    conn = connect(settings.mysql, database=False)
    try:
        with conn.cursor() as cur:
            cur.execute(
                f"CREATE DATABASE IF NOT EXISTS {quote(settings.mysql.database)} CHARACTER SET utf8mb4"
            )
            cur.execute(f"USE {quote(settings.mysql.database)}")
            for stmt in steps:
                if stmt.startswith("CREATE DATABASE"):
                    continue
                on_step(stmt)
                cur.execute(stmt)
        conn.commit()
    finally:
        conn.close()
    return steps
