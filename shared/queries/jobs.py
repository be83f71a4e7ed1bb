"""Every SQL statement on duecast's jobs and schedules tables, each named, with the index it relies on.

The jobs half of shared.queries.source (which holds the generic source statements and the IN-list renderers).
Table names come from validated settings; values are parameters; times are NOW(6) on the server.
"""

from __future__ import annotations

from dataclasses import dataclass

from duecast.shared.identifiers import quote
from duecast.shared.queries.source import int_list
from duecast.shared.states import State

IDLE, DISPATCHED, RUNNING, DONE, DEAD = (
    int(State.IDLE),
    int(State.DISPATCHED),
    int(State.RUNNING),
    int(State.DONE),
    int(State.DEAD),
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
    "last_error",
)


@dataclass(frozen=True)
class JobSQL:
    insert: str
    insert_values: str
    insert_scheduled: str
    insert_scheduled_values: str
    find_unique_holder: str
    find_scheduled_holder: str
    id_facts: str
    claim_due: str
    mark_dispatched: str
    lock_dispatched: str
    lock_dispatched_packed: str
    lock_dispatched_skip: str
    mark_running: str
    lock_leased: str
    extend_lease: str
    leased: str
    finish_delete: str
    finish_done: str
    fail_retry: str
    fail_dead: str
    snooze_delay: str
    snooze_at: str
    burn_attempt: str
    release_unpushed: str
    find_expired_dispatched: str
    requeue_dispatched: str
    find_expired_running: str
    interrupted_retry: str
    interrupted_dead: str
    find_worker_running: str
    lock_worker_running: str
    find_prunable: str
    prune: str
    release_all: str
    count_state: str
    count_due: str
    oldest_due: str
    show: str
    select_ids: str
    revive: str
    unique_among: str
    revive_unique: str
    discard: str


def render_jobs(table: str, lock_columns: tuple[str, ...] = JOB_COLUMNS) -> JobSQL:
    t = quote(table)
    cols = ", ".join(quote(c) for c in lock_columns)
    fenced = "{fence} AND `dc_state` = {state}"
    # Leaving RUNNING for good frees the unique key for a new job and ends the lease.
    finished = "`finished_at` = NOW(6), `run_at` = NOW(6), `unique_slot` = NULL, `lease_until` = NULL"
    return JobSQL(
        # An application's job: only the columns an enqueuer is granted INSERT on (sql/grants.sql);
        # the state, counters, lease and schedule columns keep their defaults.
        insert=(
            f"INSERT INTO {t} (`queue`, `task`, `payload`, `priority`, `max_attempts`, `unique_key`, "
            "`unique_slot`, `run_at`) VALUES "
        ),
        # run_at: NOW(6) + delay, or a UTC time converted to the session's zone (NOW(6)'s zone).
        insert_values=(
            "(%s, %s, %s, %s, %s, %s, %s, "
            "COALESCE(CONVERT_TZ(%s, '+00:00', @@session.time_zone), NOW(6) + INTERVAL %s MICROSECOND))"
        ),
        # A recurring schedule's run (the dispatcher): also keyed by (schedule, scheduled_for).
        insert_scheduled=(
            f"INSERT INTO {t} (`queue`, `task`, `payload`, `priority`, `max_attempts`, `unique_key`, "
            "`unique_slot`, `run_at`, `schedule`, `scheduled_for`) VALUES "
        ),
        insert_scheduled_values=(
            "(%s, %s, %s, %s, %s, %s, %s, "
            "COALESCE(CONVERT_TZ(%s, '+00:00', @@session.time_zone), NOW(6) + INTERVAL %s MICROSECOND), "
            "%s, %s)"
        ),
        # on_duplicate="keep": after a duplicate-key error, the active job holding the key (dc_unique).
        # A locking read: it sees the latest commit, whatever the transaction's snapshot, and the
        # duplicate check's lock keeps the holder from freeing the key meanwhile. Plain INSERT plus
        # this read is what lets an enqueuer merge with no UPDATE privilege at all (MariaDB wants
        # UPDATE on every inserted column for INSERT ... ON DUPLICATE KEY UPDATE).
        find_unique_holder=(
            f"SELECT `id` FROM {t} WHERE `task` = %s AND `unique_slot` = %s LOCK IN SHARE MODE"
        ),
        # ...and the run of a schedule already written for that fire time (dc_schedule_run).
        find_scheduled_holder=(
            f"SELECT `id` FROM {t} WHERE `schedule` = %s AND `scheduled_for` = %s LOCK IN SHARE MODE"
        ),
        # enqueue_many's ids: a multi-row INSERT's are consecutive from LAST_INSERT_ID() only under
        # innodb_autoinc_lock_mode 0 or 1 (MariaDB's default; MySQL 8's is 2).
        id_facts="SELECT @@innodb_autoinc_lock_mode",
        # Claim step 1, per queue: the highest-priority, oldest due jobs. dc_due (state, queue,
        # priority, run_at): one range per priority, read in index order, so no filesort and only
        # due rows are read, however many jobs are scheduled for later.
        claim_due=(
            f"SELECT `id`, `dc_attempt` FROM {t} FORCE INDEX (`dc_due`) WHERE `dc_state` = {IDLE} "
            f"AND `queue` = %s AND {_PRIO} AND `run_at` <= NOW(6) "
            "ORDER BY `priority`, `run_at`, `id` LIMIT %s FOR UPDATE SKIP LOCKED"
        ),
        mark_dispatched=(
            f"UPDATE {t} SET `dc_state` = {DISPATCHED}, `dc_attempt` = `dc_attempt` + 1, "
            "`dc_dispatched_at` = NOW(6) WHERE {ids}"
        ),
        # Worker start step 1: lock the batch's jobs still DISPATCHED under the entry's attempt
        # (PRIMARY). A duplicate entry waits for the holder's commit and then no longer matches.
        lock_dispatched=(
            f"SELECT {cols} FROM {t} FORCE INDEX (PRIMARY) WHERE "
            + fenced.replace("{state}", str(DISPATCHED))
            + " FOR UPDATE"
        ),
        # The same lock, its rows returned as one packed value (shared.storage.packed: parsing a packet
        # per row was most of a worker's time per job). Every lock column is an integer or text,
        # and payload is a plain LONGTEXT, so JSON carries each value unchanged.
        lock_dispatched_packed=(
            f"SELECT COUNT(*), JSON_ARRAYAGG(JSON_ARRAY({cols})) FROM {t} FORCE INDEX (PRIMARY) WHERE "
            + fenced.replace("{state}", str(DISPATCHED))
            + " FOR UPDATE"
        ),
        lock_dispatched_skip=(
            f"SELECT {cols} FROM {t} FORCE INDEX (PRIMARY) WHERE "
            + fenced.replace("{state}", str(DISPATCHED))
            + " FOR UPDATE SKIP LOCKED"
        ),
        # Worker start step 2 (same transaction, rows locked): DISPATCHED -> RUNNING with a lease,
        # committed before any handler runs, so a crash is known to be a crash (an interruption).
        mark_running=(
            f"UPDATE {t} SET `dc_state` = {RUNNING}, `started_at` = NOW(6), "
            "`lease_until` = NOW(6) + INTERVAL %s MICROSECOND, `worker` = %s WHERE {ids}"
        ),
        # The lease keeper, while handlers run (its own connection; PRIMARY). Step 1: lock the
        # batch's jobs still RUNNING under their attempt, skipping rows another session holds (this
        # worker's own ack, mostly): the keeper never waits for a lock, so a short read timeout is safe.
        lock_leased=(
            f"SELECT `id` FROM {t} FORCE INDEX (PRIMARY) WHERE "
            + fenced.replace("{state}", str(RUNNING))
            + " FOR UPDATE SKIP LOCKED"
        ),
        # Step 2, on the rows step 1 locked: fenced, so a lost job is never extended.
        extend_lease=(
            f"UPDATE {t} FORCE INDEX (PRIMARY) SET `lease_until` = NOW(6) + INTERVAL %s MICROSECOND "
            "WHERE " + fenced.replace("{state}", str(RUNNING))
        ),
        # Step 3, only for jobs step 1 did not lock: which are still ours (locked elsewhere for now);
        # the others have lost their lease. A plain read: it waits for nobody.
        leased=f"SELECT `id` FROM {t} FORCE INDEX (PRIMARY) WHERE " + fenced.replace("{state}", str(RUNNING)),
        # Finish, success: every statement below is fenced on (id, attempt) and RUNNING.
        finish_delete=(
            f"DELETE {t} FROM {t} FORCE INDEX (PRIMARY) WHERE " + fenced.replace("{state}", str(RUNNING))
        ),
        finish_done=(
            f"UPDATE {t} FORCE INDEX (PRIMARY) SET `dc_state` = {DONE}, {finished} WHERE "
            + fenced.replace("{state}", str(RUNNING))
        ),
        # Finish, failure with attempts left: pending again after the backoff delay (µs).
        fail_retry=(
            f"UPDATE {t} FORCE INDEX (PRIMARY) SET `dc_state` = {IDLE}, `errors` = `errors` + 1, "
            "`run_at` = NOW(6) + INTERVAL %s MICROSECOND, `last_error` = %s, `lease_until` = NULL WHERE "
            + fenced.replace("{state}", str(RUNNING))
        ),
        # Finish, failure with none left (or discarded): dead, with the error kept.
        fail_dead=(
            f"UPDATE {t} FORCE INDEX (PRIMARY) SET `dc_state` = {DEAD}, `errors` = `errors` + %s, "
            f"`last_error` = %s, {finished} WHERE " + fenced.replace("{state}", str(RUNNING))
        ),
        # The handler asked to run again later: not an error, so `errors` is unchanged.
        snooze_delay=(
            f"UPDATE {t} FORCE INDEX (PRIMARY) SET `dc_state` = {IDLE}, "
            "`run_at` = NOW(6) + INTERVAL %s MICROSECOND, `lease_until` = NULL WHERE "
            + fenced.replace("{state}", str(RUNNING))
        ),
        snooze_at=(
            f"UPDATE {t} FORCE INDEX (PRIMARY) SET `dc_state` = {IDLE}, "
            "`run_at` = CONVERT_TZ(%s, '+00:00', @@session.time_zone), `lease_until` = NULL WHERE "
            + fenced.replace("{state}", str(RUNNING))
        ),
        # A locked-but-refused DISPATCHED row (never started): its entry's copies can't run it.
        burn_attempt=(
            f"UPDATE {t} FORCE INDEX (PRIMARY) SET `dc_attempt` = `dc_attempt` + 1 WHERE "
            + fenced.replace("{state}", str(DISPATCHED))
        ),
        release_unpushed=(
            f"UPDATE {t} FORCE INDEX (PRIMARY) SET `dc_state` = {IDLE} WHERE "
            + fenced.replace("{state}", str(DISPATCHED))
        ),
        # Sweeper, per queue: dispatched but never started within the visibility timeout (entry
        # lost with Redis, or its worker died between pop and start). Not an interruption: nothing
        # ran. The dc_due prefix (DISPATCHED, queue) holds only that queue's jobs in flight.
        find_expired_dispatched=(
            f"SELECT `id` FROM {t} FORCE INDEX (`dc_due`) WHERE `dc_state` = {DISPATCHED} AND `queue` = %s "
            "AND `dc_dispatched_at` < NOW(6) - INTERVAL %s MICROSECOND LIMIT %s FOR UPDATE SKIP LOCKED"
        ),
        requeue_dispatched=f"UPDATE {t} SET `dc_state` = {IDLE} WHERE {{ids}} AND `dc_state` = {DISPATCHED}",
        # Sweeper, per queue: RUNNING jobs whose lease ran out: their worker died (or stalled past
        # it). The dc_due prefix (RUNNING, queue) holds only that queue's jobs in flight.
        find_expired_running=(
            f"SELECT `id`, `interruptions`, `worker`, `started_at` FROM {t} FORCE INDEX (`dc_due`) "
            f"WHERE `dc_state` = {RUNNING} AND `queue` = %s "
            "AND `lease_until` < NOW(6) LIMIT %s FOR UPDATE SKIP LOCKED"
        ),
        # Every interruption counts: it sizes the group the job runs in next (shared.policy).
        interrupted_retry=(
            f"UPDATE {t} SET `dc_state` = {IDLE}, `interruptions` = `interruptions` + 1, "
            "`run_at` = NOW(6), `lease_until` = NULL, `last_error` = %s "
            f"WHERE {{ids}} AND `dc_state` = {RUNNING}"
        ),
        interrupted_dead=(
            f"UPDATE {t} SET `dc_state` = {DEAD}, `interruptions` = `interruptions` + 1, "
            f"`last_error` = %s, {finished} WHERE {{ids}} AND `dc_state` = {RUNNING}"
        ),
        # Supervisor (worker/supervisor.py), per queue: the RUNNING jobs of a worker process its
        # parent saw exit (waitpid: nothing of it runs any more). Step 1, a plain read of the
        # (RUNNING, queue) prefix of dc_due: it locks nothing, so live workers' rows are not held up.
        find_worker_running=(
            f"SELECT `id` FROM {t} FORCE INDEX (`dc_due`) WHERE `dc_state` = {RUNNING} AND `queue` = %s "
            "AND `worker` = %s LIMIT %s"
        ),
        # Step 2: lock those still RUNNING under that worker (PRIMARY); waits only for the dead
        # process's own sessions, rolled back as MySQL sees them close. Then interrupted_retry/dead.
        lock_worker_running=(
            f"SELECT `id`, `interruptions`, `worker`, `started_at` FROM {t} FORCE INDEX (PRIMARY) "
            f"WHERE {{ids}} AND `dc_state` = {RUNNING} AND `worker` = %s FOR UPDATE"
        ),
        # Pruner: finished jobs older than their retention (run_at is the finish time once a job
        # is done or dead). dc_due ranges per (state, queue, priority).
        find_prunable=(
            f"SELECT `id` FROM {t} FORCE INDEX (`dc_due`) WHERE `dc_state` = %s AND `queue` IN ({{queues}}) "
            f"AND {_PRIO} AND `run_at` < NOW(6) - INTERVAL %s MICROSECOND LIMIT %s"
        ),
        # ...deleted only if still in that state (a replay may have revived one meanwhile).
        prune=f"DELETE FROM {t} WHERE {{ids}} AND `dc_state` = %s",
        # A queue's jobs in flight -> pending (only with no dispatcher or worker running).
        release_all=(
            f"UPDATE {t} SET `dc_state` = {IDLE}, `lease_until` = NULL "
            f"WHERE `dc_state` IN ({DISPATCHED}, {RUNNING}) AND `queue` = %s"
        ),
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
            f"UPDATE {t} SET `dc_state` = {IDLE}, `run_at` = NOW(6), `errors` = 0, `interruptions` = 0, "
            "`finished_at` = NULL, `lease_until` = NULL WHERE {ids} AND `dc_state` IN ({states}) "
            "AND `unique_key` IS NULL"
        ),
        unique_among=f"SELECT `id` FROM {t} WHERE {{ids}} AND `unique_key` IS NOT NULL",
        revive_unique=(
            f"UPDATE {t} SET `dc_state` = {IDLE}, `run_at` = NOW(6), `errors` = 0, `interruptions` = 0, "
            "`finished_at` = NULL, `lease_until` = NULL, `unique_slot` = `unique_key` "
            "WHERE `id` = %s AND `dc_state` IN ({states}) AND `unique_key` IS NOT NULL"
        ),
        # Discard: gone for good, and only when not in flight (a running job finishes first).
        discard=f"DELETE FROM {t} WHERE {{ids}} AND `dc_state` IN ({IDLE}, {DONE}, {DEAD})",
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
