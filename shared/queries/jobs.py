"""Every SQL statement on duecast's jobs and schedules tables, each named, with the index it relies on.

The jobs half of shared.queries.source (which holds the generic source statements and the IN-list renderers).
Table names come from validated settings; values are parameters; times are NOW(6) on the server.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..identifiers import quote
from ..states import State
from .source import delete_by_key, int_list

IDLE, DISPATCHED, RUNNING, DONE, DEAD, CANCELLED = (
    int(State.IDLE),
    int(State.DISPATCHED),
    int(State.RUNNING),
    int(State.DONE),
    int(State.DEAD),
    int(State.CANCELLED),
)
PRIORITIES = range(10)  # 0 runs first
_PRIO = f"`priority` IN ({int_list(PRIORITIES)})"
# What a worker reads of a job it starts.
JOB_COLUMNS = (
    "id",
    "dc_attempt",
    "task",
    "payload",
    "errors",
    "max_attempts",
    "interruptions",
    "queue",  # with created_at: a task's JobContext (shared/api/context.py)
    "created_at",
    "meta",  # what enqueue middleware carried (a trace context): JobContext.meta
)
# Columns of `duecast jobs show/list`.
SHOW_COLUMNS = (
    "id",
    "queue",
    "task",
    "priority",
    "dc_state",
    "dc_attempt",
    "errors",
    "max_attempts",
    "interruptions",
    "run_at",
    "created_at",
    "started_at",
    "finished_at",
    "worker",
    "unique_key",
    "schedule",
    "scheduled_for",
    "payload",
    "result",
    "last_error",
)


@dataclass(frozen=True)
class JobSQL:
    insert: str
    insert_values: str
    insert_scheduled: str
    insert_keyed: str
    insert_keyed_values: str
    insert_scheduled_values: str
    find_unique_holder: str
    call_unique_holder: str
    find_scheduled_holder: str
    id_facts: str
    read_result: str
    call_result: str
    read_job: str
    find_prunable: str
    prune: str
    count_state: str
    count_due: str
    oldest_due: str
    show: str
    select_ids: str
    revive: str
    unique_among: str
    revive_unique: str
    discard: str
    cancel: str
    cancelled_among: str


def render_jobs(table: str) -> JobSQL:
    """The jobs table's statements but dispatch's: jobs are dispatched in runs (job_runs.py)."""
    t = quote(table)
    return JobSQL(
        **_enqueueing(t, quote(f"{table}_holder")),
        **_results(t, quote(f"{table}_result")),
        **_upkeep(t),
        **_operating(t),
        **_cancelling(t),
    )


# What Enqueuer.result() tells of a job, in this order (the function below returns the same as JSON).
RESULT_COLUMNS = ("dc_state", "result", "last_error", "errors", "dc_attempt", "created_at", "finished_at")


def _results(t: str, reader: str) -> dict[str, str]:
    """An application's read of one job's outcome (Enqueuer.result): by primary key."""
    cols = ", ".join(quote(c) for c in RESULT_COLUMNS)
    return dict(
        read_result=f"SELECT {cols} FROM {t} WHERE `id` = %s",
        # For an enqueuer account with no SELECT (sql/grants.sql): the DBA's definer function
        # `<table>_result` returns the same columns as one JSON array, or NULL.
        call_result=f"SELECT {reader}(%s)",
        # ...and with what it runs (a framework's task API rebuilds its call from it: Django's).
        read_job=f"SELECT {cols}, `task`, `payload`, `started_at` FROM {t} WHERE `id` = %s",
    )


def _enqueueing(t: str, holder: str) -> dict[str, str]:
    """An application's writes: the INSERT, and what a duplicate key or new ids need."""
    return dict(
        # An application's job: only the columns an enqueuer is granted INSERT on (sql/grants.sql);
        # the state, counters, lease and schedule columns keep their defaults.
        insert=(
            f"INSERT INTO {t} (`queue`, `task`, `payload`, `priority`, `max_attempts`, `unique_key`, "
            "`unique_slot`, `run_at`, `meta`) VALUES "
        ),
        # run_at: NOW(6) + delay, or a UTC time converted to the session's zone (NOW(6)'s zone).
        insert_values=(
            "(%s, %s, %s, %s, %s, %s, %s, "
            "COALESCE(CONVERT_TZ(%s, '+00:00', @@session.time_zone), NOW(6) + INTERVAL %s MICROSECOND), %s)"
        ),
        # A job given a concurrency key: the same, and the key (`[jobs.key_limits]`).
        insert_keyed=(
            f"INSERT INTO {t} (`queue`, `task`, `payload`, `priority`, `max_attempts`, `unique_key`, "
            "`unique_slot`, `run_at`, `meta`, `concurrency_key`) VALUES "
        ),
        insert_keyed_values=(
            "(%s, %s, %s, %s, %s, %s, %s, "
            "COALESCE(CONVERT_TZ(%s, '+00:00', @@session.time_zone), NOW(6) + INTERVAL %s MICROSECOND), "
            "%s, %s)"
        ),
        # A recurring schedule's run (the dispatcher): also keyed by (schedule, scheduled_for).
        insert_scheduled=(
            f"INSERT INTO {t} (`queue`, `task`, `payload`, `priority`, `max_attempts`, `unique_key`, "
            "`unique_slot`, `run_at`, `meta`, `schedule`, `scheduled_for`) VALUES "
        ),
        insert_scheduled_values=(
            "(%s, %s, %s, %s, %s, %s, %s, "
            "COALESCE(CONVERT_TZ(%s, '+00:00', @@session.time_zone), NOW(6) + INTERVAL %s MICROSECOND), "
            "%s, %s, %s)"
        ),
        # on_duplicate="keep": after a duplicate-key error, the active job holding the key (dc_unique).
        # A locking read: it sees the latest commit, whatever the transaction's snapshot, and the
        # duplicate check's lock keeps the holder from freeing the key meanwhile. Plain INSERT plus
        # this read is what lets an enqueuer merge with no UPDATE privilege at all (MariaDB wants
        # UPDATE on every inserted column for INSERT ... ON DUPLICATE KEY UPDATE).
        find_unique_holder=(
            f"SELECT `id` FROM {t} WHERE `task` = %s AND `unique_slot` = %s LOCK IN SHARE MODE"
        ),
        # The same read for an enqueuer account with no SELECT on the table (so it cannot lock its
        # rows: sql/grants.sql): the function `<table>_holder` the DBA made runs it with a definer's
        # rights, and returns the id or NULL.
        call_unique_holder=f"SELECT {holder}(%s, %s)",
        # ...and the run of a schedule already written for that fire time (dc_schedule_run).
        find_scheduled_holder=(
            f"SELECT `id` FROM {t} WHERE `schedule` = %s AND `scheduled_for` = %s LOCK IN SHARE MODE"
        ),
        # enqueue_many's ids: a multi-row INSERT's are consecutive from LAST_INSERT_ID() only under
        # innodb_autoinc_lock_mode 0 or 1 (MariaDB's default; MySQL 8's is 2).
        id_facts="SELECT @@innodb_autoinc_lock_mode",
    )


def _upkeep(t: str) -> dict[str, str]:
    """The pruner's deletes and the status reads, bounded."""
    return dict(
        # Pruner: finished jobs older than their retention (run_at is the finish time once a job
        # is done or dead). dc_due ranges per (state, queue, priority).
        find_prunable=(
            f"SELECT `id` FROM {t} FORCE INDEX (`dc_due`) WHERE `dc_state` = %s AND `queue` IN ({{queues}}) "
            f"AND {_PRIO} AND `run_at` < NOW(6) - INTERVAL %s MICROSECOND LIMIT %s"
        ),
        # ...deleted only if still in that state (a replay may have revived one meanwhile); by
        # PRIMARY (delete_by_key), so a short table's prune never waits on a row it does not name.
        # Parameters: the state, then the number of ids.
        prune=delete_by_key(t, "{ids} AND `dc_state` = %s", "`id`"),
        # Status, per queue: a dc_due prefix count, capped so a huge queue costs a bounded read.
        count_state=(
            f"SELECT COUNT(*) FROM (SELECT 1 FROM {t} FORCE INDEX (`dc_due`) "
            "WHERE `dc_state` = %s AND `queue` = %s LIMIT %s) AS n"
        ),
        count_due=(
            f"SELECT COUNT(*) FROM (SELECT 1 FROM {t} FORCE INDEX (`dc_due`) WHERE `dc_state` = {IDLE} "
            f"AND `queue` = %s AND {_PRIO} AND `run_at` <= NOW(6) LIMIT %s) AS n"
        ),
        # The oldest due job of a queue: one index dive per priority.
        oldest_due=(
            "SELECT TIMESTAMPDIFF(MICROSECOND, MIN(`run_at`), NOW(6)) FROM ("
            + " UNION ALL ".join(
                f"(SELECT `run_at` FROM {t} FORCE INDEX (`dc_due`) WHERE `dc_state` = {IDLE} "
                f"AND `queue` = %s AND `priority` = {p} AND `run_at` <= NOW(6) ORDER BY `run_at` LIMIT 1)"
                for p in PRIORITIES
            )
            + ") AS heads"
        ),
    )


def _operating(t: str) -> dict[str, str]:
    """Operator commands (`duecast jobs`): show, retry / replay, discard."""
    return dict(
        # Operator commands (`duecast jobs`): `{where}` is built from fixed column names with
        # every value a parameter (admin.job_admin.Filter).
        show=(
            f"SELECT {', '.join(quote(c) for c in SHOW_COLUMNS)} FROM {t} WHERE {{where}} "
            "ORDER BY `id` {order} LIMIT %s"
        ),
        select_ids=f"SELECT `id` FROM {t} WHERE {{where}} AND `id` > %s ORDER BY `id` LIMIT %s",
        # Retry / replay: a finished or dead job becomes pending now, with a fresh error budget.
        # Jobs without a unique key go in bulk; a unique job takes its key back one by one, and
        # is left alone if another active job holds that key.
        revive=(
            f"UPDATE {t} FORCE INDEX (PRIMARY) SET `dc_state` = {IDLE}, `run_at` = NOW(6), `errors` = 0, "
            "`interruptions` = 0, `finished_at` = NULL, `lease_until` = NULL "
            "WHERE {ids} AND `dc_state` IN ({states}) AND `unique_key` IS NULL"
        ),
        unique_among=f"SELECT `id` FROM {t} WHERE {{ids}} AND `unique_key` IS NOT NULL",
        revive_unique=(
            f"UPDATE {t} SET `dc_state` = {IDLE}, `run_at` = NOW(6), `errors` = 0, `interruptions` = 0, "
            "`finished_at` = NULL, `lease_until` = NULL, `unique_slot` = `unique_key` "
            "WHERE `id` = %s AND `dc_state` IN ({states}) AND `unique_key` IS NOT NULL"
        ),
        # Discard: gone for good, and only when not in flight (a running job finishes first). By
        # PRIMARY, with the number of ids as its parameter (delete_by_key).
        discard=delete_by_key(t, f"{{ids}} AND `dc_state` IN ({IDLE}, {DONE}, {DEAD}, {CANCELLED})", "`id`"),
    )


def _cancelling(t: str) -> dict[str, str]:
    """Cancel (`duecast jobs cancel`, Enqueuer.cancel) and the worker's read of the cancels of the
    jobs it runs (worker/cancels.py). By primary key."""
    return dict(
        # Pending (IDLE, due or scheduled, or a member of a dispatched or running run, whose row
        # reads IDLE until it finishes) -> cancelled, final. Every finish of a run's member is
        # fenced on `dc_state` = IDLE, so one racing this either commits first (this then changes
        # 0 rows) or finds the row cancelled and changes nothing (stale): exactly one wins. The
        # key is freed and run_at is the finish time, as for a dead job (the pruner's clock); the
        # last error, if any, is kept.
        cancel=(
            f"UPDATE {t} FORCE INDEX (PRIMARY) SET `dc_state` = {CANCELLED}, `finished_at` = NOW(6), "
            f"`run_at` = NOW(6), `unique_slot` = NULL, `lease_until` = NULL "
            f"WHERE {{ids}} AND `dc_state` = {IDLE}"
        ),
        # A worker's poll: which of the jobs it runs were cancelled meanwhile.
        cancelled_among=f"SELECT `id` FROM {t} WHERE {{ids}} AND `dc_state` = {CANCELLED}",
    )


@dataclass(frozen=True)
class ScheduleSQL:
    ensure: str
    lock: str
    advance: str


def render_schedules(table: str) -> ScheduleSQL:
    t = quote(table)
    return ScheduleSQL(
        # A schedule seen for the first time starts now: it does not backfill its past.
        ensure=f"INSERT IGNORE INTO {t} (`name`, `last_run_at`) VALUES (%s, UTC_TIMESTAMP(6))",
        # Two dispatchers serialise on this row lock; the second sees the first's last_run_at.
        lock=f"SELECT `last_run_at`, UTC_TIMESTAMP(6) FROM {t} WHERE `name` = %s FOR UPDATE",
        advance=f"UPDATE {t} SET `last_run_at` = %s, `runs` = `runs` + %s WHERE `name` = %s",
    )
