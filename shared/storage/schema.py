"""Schema duecast owns: the jobs table, the dispatch columns it adds to a source, and start-up checks.

Migrations are idempotent: each step looks at information_schema first and only adds what is missing,
so `duecast migrate` can run on every deploy. It never copies or rewrites business rows.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import DuecastError
from ..identifiers import quote
from ..queries.job_runs import RUN_ID_BASE
from ..settings import JobsSettings, SourceSettings
from ..states import ATTEMPT_COLUMN, DISPATCHED_AT_COLUMN, DUE_INDEX, STATE_COLUMN
from .units import ACCESS_DENIED, DRIVER_ERRORS, Cursor, error_code

DISPATCH_COLUMNS: dict[str, str] = {
    STATE_COLUMN: "TINYINT UNSIGNED NOT NULL DEFAULT 0",
    ATTEMPT_COLUMN: "INT UNSIGNED NOT NULL DEFAULT 0",
    DISPATCHED_AT_COLUMN: "DATETIME(6) NULL",
}
_INTEGER_TYPES = {"tinyint", "smallint", "mediumint", "int", "bigint"}
_TIME_TYPES = {"datetime", "timestamp"}


class SchemaError(DuecastError, RuntimeError):
    """The database does not match the settings; the message says what to run or fix."""


# The jobs table, column by column: `duecast migrate` creates it, or adds what an older one lacks.
JOB_COLUMNS: dict[str, str] = {
    "id": "BIGINT NOT NULL AUTO_INCREMENT",
    "queue": "VARCHAR(48) NOT NULL DEFAULT 'default'",
    "task": "VARCHAR(191) NOT NULL",
    "payload": "LONGTEXT NOT NULL",  # JSON text, validated by the enqueuer
    "priority": "TINYINT UNSIGNED NOT NULL DEFAULT 0",  # 0 runs first
    # When it may run while pending; when it finished once done or dead (the pruner's clock).
    "run_at": "DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)",
    "created_at": "DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)",
    "max_attempts": "SMALLINT UNSIGNED NOT NULL DEFAULT 20",
    "errors": "SMALLINT UNSIGNED NOT NULL DEFAULT 0",  # runs that raised
    "interruptions": "SMALLINT UNSIGNED NOT NULL DEFAULT 0",  # runs whose worker died
    "unique_key": "VARCHAR(191) NULL",
    # = unique_key while pending or running, NULL once finished: the unique index on (task, it)
    # makes "one active job per task and key" race-free.
    "unique_slot": "VARCHAR(191) NULL",
    "schedule": "VARCHAR(64) NULL",  # the recurring schedule that made it
    "scheduled_for": "DATETIME(6) NULL",  # ...and for which fire time (UTC)
    "started_at": "DATETIME(6) NULL",
    "lease_until": "DATETIME(6) NULL",
    "worker": "VARCHAR(128) NULL",
    "finished_at": "DATETIME(6) NULL",
    "last_error": "MEDIUMTEXT NULL",
    # What middleware at enqueue carries to the run (a trace context): a JSON object of strings.
    "meta": "TEXT NULL",
    # A done job's return value as JSON text, when its task returned one (docs/jobs.md, "Results").
    "result": "MEDIUMTEXT NULL",
    # The job's concurrency key (an account, a tenant), given at enqueue; NULL: none. Counted only in
    # a queue with `[jobs.key_limits.<queue>]` (shared/queries/key_runs.py).
    "concurrency_key": "VARCHAR(191) NULL",
    **DISPATCH_COLUMNS,
}
# name -> (kind, columns)
JOB_INDEXES: dict[str, tuple[str, tuple[str, ...]]] = {
    DUE_INDEX: ("KEY", (STATE_COLUMN, "queue", "priority", "run_at")),
    # Unique keys are scoped per task (docs/jobs.md); a table of duecast <= 0.1 had them global:
    # `duecast migrate` rebuilds the index (a wider unique key cannot fail on existing rows).
    "dc_unique": ("UNIQUE KEY", ("task", "unique_slot")),
    "dc_schedule_run": ("UNIQUE KEY", ("schedule", "scheduled_for")),
}
# Only where `[jobs.task_limits]` is set: a limited task's claim reads its own due jobs by it (one
# range per priority), never through the queue's other due jobs; other installs do not pay for it.
TASK_INDEX = ("dc_task", ("KEY", (STATE_COLUMN, "task", "queue", "priority", "run_at")))
# A run of one limited task names it (NULL: a run of the queue's other tasks); `dc_task` counts a
# task's runs in flight (max_running) and finds its pending ones. Added to an older runs table by
# `duecast migrate`; needed only where task limits are set.
RUN_TASK_COLUMN = ("task", "VARCHAR(191) NULL")
RUN_TASK_INDEX = ("dc_task", ("task", "dc_state"))
# Only where `[jobs.key_limits]` is set: a key's due jobs (one range per priority), the next key with
# pending jobs (round robin), and the queue's jobs of no key (`concurrency_key` IS NULL, an equality
# prefix like dc_due's) are each an index range, never a read through another key's backlog.
KEY_INDEX = ("dc_key", ("KEY", (STATE_COLUMN, "queue", "concurrency_key", "priority", "run_at")))
# A run of one key names it (NULL: a run of the queue's jobs of no key); `dc_key` reads a key's
# runs: its jobs in flight (max_running_per_key), pending and held. Added by `duecast migrate`.
RUN_KEY_COLUMN = ("concurrency_key", "VARCHAR(191) NULL")
RUN_KEY_INDEX = ("dc_key", ("queue", "concurrency_key", "dc_state"))


def job_indexes(jobs: JobsSettings) -> dict[str, tuple[str, tuple[str, ...]]]:
    """The jobs table's indexes under these settings: dc_task only where tasks are limited, dc_key
    only where keys are."""
    out = dict(JOB_INDEXES)
    if jobs.task_limits:
        out[TASK_INDEX[0]] = TASK_INDEX[1]
    if jobs.key_limits:
        out[KEY_INDEX[0]] = KEY_INDEX[1]
    return out


def jobs_table_ddl(jobs: JobsSettings) -> str:
    cols = ",\n  ".join(f"{quote(name)} {kind}" for name, kind in JOB_COLUMNS.items())
    keys = ",\n  ".join(
        f"{kind} {quote(name)} ({', '.join(quote(c) for c in columns)})"
        for name, (kind, columns) in job_indexes(jobs).items()
    )
    return (
        f"CREATE TABLE IF NOT EXISTS {quote(jobs.table)} (\n  {cols},\n  PRIMARY KEY (`id`),\n  {keys}\n)"
        " ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin"
    )


def workers_table_ddl(table: str) -> str:
    return f"""CREATE TABLE IF NOT EXISTS {quote(table)} (
  `name` VARCHAR(191) NOT NULL,
  `host` VARCHAR(128) NOT NULL,
  `pid` INT UNSIGNED NOT NULL,
  `sources` VARCHAR(4096) NOT NULL,
  `tasks` MEDIUMTEXT NULL,
  `started_at` DATETIME(6) NOT NULL,
  `heartbeat_at` DATETIME(6) NOT NULL,
  PRIMARY KEY (`name`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin"""


def workers_migration(table: str, info: TableInfo) -> list[str]:
    """What a workers table of an older duecast lacks: `tasks`, the job tasks each worker serves
    (NULL: a worker too old to say), which `duecast enqueue` checks task names against."""
    if "tasks" in info.columns:
        return []
    return [f"ALTER TABLE {quote(table)} ADD COLUMN `tasks` MEDIUMTEXT NULL AFTER `sources`"]


def leases_table_ddl(table: str) -> str:
    return f"""CREATE TABLE IF NOT EXISTS {quote(table)} (
  `name` VARCHAR(64) NOT NULL,
  `holder` VARCHAR(191) NOT NULL,
  `expires_at` DATETIME(6) NOT NULL,
  PRIMARY KEY (`name`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin"""


def runs_table_ddl(jobs: JobsSettings) -> str:
    """Job runs (shared/queries/job_runs.py). Ids start at RUN_ID_BASE, above every job id, so a
    ready-list entry names a job or a run by its id. `members`: the ids still to finish, as
    `a-b,c,...` (shared.storage.leased.members); `jobs`: how many; `suspects`: interruptions behind
    its members (0: a clean run)."""
    return f"""CREATE TABLE IF NOT EXISTS {quote(jobs.runs_table)} (
  `id` BIGINT NOT NULL AUTO_INCREMENT,
  `queue` VARCHAR(48) NOT NULL,
  `priority` TINYINT UNSIGNED NOT NULL,
  `suspects` SMALLINT UNSIGNED NOT NULL DEFAULT 0,
  `jobs` INT UNSIGNED NOT NULL,
  `members` MEDIUMTEXT NOT NULL,
  `dc_state` TINYINT UNSIGNED NOT NULL DEFAULT 0,
  `dc_attempt` INT UNSIGNED NOT NULL DEFAULT 0,
  `dc_dispatched_at` DATETIME(6) NULL,
  `started_at` DATETIME(6) NULL,
  `lease_until` DATETIME(6) NULL,
  `worker` VARCHAR(128) NULL,
  `{RUN_TASK_COLUMN[0]}` {RUN_TASK_COLUMN[1]},
  `{RUN_KEY_COLUMN[0]}` {RUN_KEY_COLUMN[1]},
  PRIMARY KEY (`id`),
  KEY `dc_runs` (`queue`, `dc_state`, `priority`),
  KEY `{RUN_TASK_INDEX[0]}` ({", ".join(quote(c) for c in RUN_TASK_INDEX[1])}),
  KEY `{RUN_KEY_INDEX[0]}` ({", ".join(quote(c) for c in RUN_KEY_INDEX[1])})
) ENGINE=InnoDB AUTO_INCREMENT={RUN_ID_BASE} DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin"""


def cursors_table_ddl(jobs: JobsSettings) -> str:
    """Per queue and priority, the (run_at, id) of the last job dispatched in a run."""
    return f"""CREATE TABLE IF NOT EXISTS {quote(jobs.cursors_table)} (
  `queue` VARCHAR(48) NOT NULL,
  `priority` TINYINT UNSIGNED NOT NULL,
  `run_at` DATETIME(6) NOT NULL,
  `id` BIGINT NOT NULL,
  PRIMARY KEY (`queue`, `priority`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin"""


def schedules_table_ddl(jobs: JobsSettings) -> str:
    return f"""CREATE TABLE IF NOT EXISTS {quote(jobs.schedules_table)} (
  `name` VARCHAR(64) NOT NULL,
  `last_run_at` DATETIME(6) NOT NULL,
  `runs` BIGINT UNSIGNED NOT NULL DEFAULT 0,
  PRIMARY KEY (`name`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin"""


def jobs_migration(jobs: JobsSettings, info: TableInfo, indexes: dict[str, list[str]]) -> list[str]:
    """What an existing jobs table of an older duecast lacks: columns, then indexes (rebuilt if changed)."""
    t = quote(jobs.table)
    steps = [
        f"ALTER TABLE {t} ADD COLUMN {quote(name)} {kind}"
        for name, kind in JOB_COLUMNS.items()
        if name not in info.columns
    ]
    for name, (kind, columns) in job_indexes(jobs).items():
        have = indexes.get(name)
        if have == list(columns):
            continue
        drop = f"DROP INDEX {quote(name)}, " if have else ""
        cols = ", ".join(quote(c) for c in columns)
        steps.append(f"ALTER TABLE {t} {drop}ADD {kind} {quote(name)} ({cols})")
    return steps


def runs_migration(jobs: JobsSettings, info: TableInfo) -> list[str]:
    """What a runs table of an older duecast lacks: the `task` of a limited task's runs, and the
    `concurrency_key` of a key's runs, each with its index."""
    steps = []
    for (column, kind), (index, columns) in (
        (RUN_TASK_COLUMN, RUN_TASK_INDEX),
        (RUN_KEY_COLUMN, RUN_KEY_INDEX),
    ):
        if column not in info.columns:
            cols = ", ".join(quote(c) for c in columns)
            steps.append(
                f"ALTER TABLE {quote(jobs.runs_table)} ADD COLUMN {quote(column)} {kind}, "
                f"ADD KEY {quote(index)} ({cols})"
            )
    return steps


def index_columns(cur: Cursor, table: str) -> dict[str, list[str]]:
    """Every index of `table`: name -> its columns in order."""
    cur.execute(
        "SELECT INDEX_NAME, COLUMN_NAME FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = DATABASE() "
        "AND TABLE_NAME = %s ORDER BY INDEX_NAME, SEQ_IN_INDEX",
        (table,),
    )
    out: dict[str, list[str]] = {}
    for name, column in cur.fetchall():
        out.setdefault(str(name), []).append(str(column))
    return out


def check_jobs_table(cur: Cursor, jobs: JobsSettings) -> None:
    """Raise SchemaError unless the jobs and schedules tables are as this version needs them."""
    info = described(cur, jobs.table, f"the jobs table {jobs.table}")
    if not info.columns or jobs_migration(jobs, info, index_columns(cur, jobs.table)):
        raise SchemaError(
            f"the jobs table {jobs.table} is missing or older than this duecast; run `duecast migrate`"
        )
    for table in (jobs.schedules_table, jobs.runs_table, jobs.cursors_table):
        if not describe(cur, table).columns:
            raise SchemaError(unseen(cur, f"the table {table}", table))
    runs = describe(cur, jobs.runs_table).columns
    for setting, column in (("task_limits", RUN_TASK_COLUMN[0]), ("key_limits", RUN_KEY_COLUMN[0])):
        if getattr(jobs, setting) and column not in runs:
            raise SchemaError(
                f"jobs.{setting} needs the `{column}` column of {jobs.runs_table}; run `duecast migrate`"
            )


def denied(cur: Cursor, table: str) -> bool:
    """Whether this account may not touch `table` at all. information_schema lists only what an
    account holds a privilege on, so a table it may not touch looks missing there: a probe tells
    the two apart (MySQL answers 1142 for a table one may not touch, existing or not)."""
    try:
        cur.execute(f"SELECT 1 FROM {quote(table)} LIMIT 0")
    except DRIVER_ERRORS as exc:
        return error_code(exc) in ACCESS_DENIED
    return False


def access_denied_to(what: str) -> str:
    return (
        f"{what}: access denied to this account (grant its role's privileges: sql/grants.sql, "
        "docs/security.md; if the table is missing, run `duecast migrate`)"
    )


def described(cur: Cursor, table: str, what: str) -> TableInfo:
    """describe(), refusing a table this account may not touch with the access-denied line."""
    info = describe(cur, table)
    if not info.columns and denied(cur, table):
        raise SchemaError(access_denied_to(what))
    return info


def unseen(cur: Cursor, what: str, table: str) -> str:
    """Why `table` shows no column: access denied, or missing."""
    return access_denied_to(what) if denied(cur, table) else f"{what} is missing; run `duecast migrate`"


@dataclass(frozen=True)
class TableInfo:
    columns: dict[str, str]  # name -> DATA_TYPE
    index_columns: list[str]  # columns of dc_due, in order; empty if the index is missing
    primary: list[str] | None = None  # PRIMARY KEY columns; None when not read


def describe(cur: Cursor, table: str) -> TableInfo:
    cur.execute(
        "SELECT COLUMN_NAME, DATA_TYPE FROM information_schema.COLUMNS "
        "WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = %s",
        (table,),
    )
    columns = {str(name): str(kind).lower() for name, kind in cur.fetchall()}
    cur.execute(
        "SELECT COLUMN_NAME FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = DATABASE() "
        "AND TABLE_NAME = %s AND INDEX_NAME = %s ORDER BY SEQ_IN_INDEX",
        (table, DUE_INDEX),
    )
    due_index = [str(r[0]) for r in cur.fetchall()]
    cur.execute(
        "SELECT COLUMN_NAME FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = DATABASE() "
        "AND TABLE_NAME = %s AND INDEX_NAME = 'PRIMARY' ORDER BY SEQ_IN_INDEX",
        (table,),
    )
    return TableInfo(columns, due_index, [str(r[0]) for r in cur.fetchall()])


def source_migration(src: SourceSettings, info: TableInfo) -> list[str]:
    """The ALTER statements that would make `src.table` dispatchable; empty when it already is."""
    check_business_columns(src, info)
    t = quote(src.table)
    missing = [c for c in DISPATCH_COLUMNS if c not in info.columns]
    steps = []
    if missing:
        adds = ", ".join(f"ADD COLUMN {quote(c)} {DISPATCH_COLUMNS[c]}" for c in missing)
        steps.append(f"ALTER TABLE {t} {adds}")
    if not info.index_columns:
        steps.append(
            f"ALTER TABLE {t} ADD INDEX {quote(DUE_INDEX)} ({quote(STATE_COLUMN)}, {quote(src.due_column)})"
        )
    return steps


def check_source(src: SourceSettings, info: TableInfo) -> None:
    """Raise SchemaError unless the table is ready to dispatch from (run at every role start)."""
    if source_migration(src, info):
        raise SchemaError(
            f"source {src.name}: table {src.table} lacks duecast's dispatch columns or its "
            f"{DUE_INDEX} index; run `duecast migrate` (or `duecast migrate --print` to review)"
        )
    want = [STATE_COLUMN, src.due_column]
    if info.index_columns != want:
        raise SchemaError(
            f"source {src.name}: index {DUE_INDEX} on {src.table} is on "
            f"({', '.join(info.index_columns)}), expected ({', '.join(want)})"
        )


def check_business_columns(src: SourceSettings, info: TableInfo) -> None:
    if not info.columns:
        raise SchemaError(f"source {src.name}: table {src.table} does not exist in this database")
    for col, kinds, what in (
        (src.id_column, _INTEGER_TYPES, "an integer key"),
        (src.due_column, _TIME_TYPES, "a DATETIME or TIMESTAMP"),
    ):
        kind = info.columns.get(col)
        if kind is None:
            raise SchemaError(f"source {src.name}: table {src.table} has no column {col}")
        if kind not in kinds:
            raise SchemaError(f"source {src.name}: {src.table}.{col} is {kind}; it must be {what}")
    # Every claim, lock and ack addresses one row by this key: it must be the whole primary key.
    if info.primary is not None and info.primary != [src.id_column]:
        raise SchemaError(
            f"source {src.name}: {src.table}.{src.id_column} must be the table's primary key "
            f"(it is ({', '.join(info.primary) or 'none'}))"
        )
