"""Every SQL statement of job runs: the runs and cursors tables, and the run-fenced finishes of jobs.

A run is up to jobs.run_size due jobs of one queue and priority, dispatched, started, leased and fenced
as one row of the runs table; its jobs' rows are not written until each finishes
(docs/architecture.md, "Job runs"). Table names come from validated settings; values are parameters.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..identifiers import quote
from .jobs import DEAD, DISPATCHED, DONE, IDLE, PRIORITIES, RUNNING
from .source import delete_by_key

# Run ids start here (the runs table's AUTO_INCREMENT), above any job id a table will reach, so a
# ready-list entry names a job or a run by its id alone and the entry codec stays one.
RUN_ID_BASE = 2**62
NEVER = "1000-01-01 00:00:00"  # a cursor before every job


@dataclass(frozen=True)
class RunSQL:
    ensure_cursors: str
    lock_cursors: str
    advance_cursor: str
    read_ahead: str
    read_behind: str
    count_behind: str
    live_members: str
    lock_all_cursors: str
    all_members: str
    all_runs: str
    insert_run: str
    claim_idle: str
    mark_dispatched: str
    lock_dispatched: str
    lock_dispatched_skip: str
    mark_running: str
    started_by: str
    give_back: str
    lock_leased: str
    extend_lease: str
    leased: str
    lock_running: str
    keep_members: str
    drop_runs: str
    expired_dispatched: str
    requeue_dispatched: str
    release_unpushed: str
    expired_running: str
    find_worker_running: str
    lock_worker_running: str
    release: str
    release_legacy: str
    requeue_legacy: str
    in_flight: str
    jobs_in_runs: str
    jobs_of_runs: str
    member_interruptions: str
    member_rows: str
    member_rows_plain: str
    finish_delete: str
    finish_done: str
    finish_done_result: str
    fail_retry: str
    fail_dead: str
    snooze_delay: str
    snooze_at: str
    interrupted_retry: str
    interrupted_dead: str
    interrupted_excused: str


def _ahead(priorities: range, behind: bool) -> str:
    """Per priority, the jobs after its cursor (run_at, id), or at or before it; cursor values as
    parameters: (run_at, run_at, id) per priority, in order. dc_due ends in (priority, run_at) and
    InnoDB appends the primary key, so each branch is one index range read in order."""
    if behind:
        branch = "(`priority` = {p} AND (`run_at` < %s OR (`run_at` = %s AND `id` <= %s)))"
    else:
        branch = "(`priority` = {p} AND (`run_at` > %s OR (`run_at` = %s AND `id` > %s)))"
    return "(" + " OR ".join(branch.format(p=p) for p in priorities) + ")"


@dataclass(frozen=True)
class _RunNames:
    """The quoted tables and the fragments the runs' statements share."""

    j: str
    r: str
    c: str
    cols: str
    fenced: str
    member: str
    finished: str


def _run_names(
    jobs_table: str, runs_table: str, cursors_table: str, lock_columns: tuple[str, ...]
) -> _RunNames:
    j, r, c = quote(jobs_table), quote(runs_table), quote(cursors_table)
    cols = ", ".join(quote(col) for col in lock_columns)
    fenced = "{fence} AND `dc_state` = {state}"
    # A member's finish: the run's row is locked and fenced first (RunBatch), so the job row only
    # has to be still pending (IDLE) and one of the run's members (the ids given).
    member = "{ids} AND `dc_state` = " + str(IDLE)
    finished = "`finished_at` = NOW(6), `run_at` = NOW(6), `unique_slot` = NULL, `lease_until` = NULL"
    return _RunNames(j=j, r=r, c=c, cols=cols, fenced=fenced, member=member, finished=finished)


def render_runs(
    jobs_table: str, runs_table: str, cursors_table: str, lock_columns: tuple[str, ...]
) -> RunSQL:
    n = _run_names(jobs_table, runs_table, cursors_table, lock_columns)
    return RunSQL(**_cursors(n), **_claiming(n), **_starting(n), **_requeueing(n), **_members(n))


def _cursors(n: _RunNames) -> dict[str, str]:
    """The claim's cursors per (queue, priority), and the due jobs ahead of and behind them."""
    j, c = n.j, n.c
    return dict(
        # One cursor row per (queue, priority), made before the first claim locks them.
        ensure_cursors=f"INSERT IGNORE INTO {c} (`queue`, `priority`, `run_at`, `id`) VALUES {{rows}}",
        # A claim holds its queue's cursors: claims and the sweep of a queue never run side by side.
        lock_cursors=f"SELECT `priority`, `run_at`, `id` FROM {c} WHERE `queue` = %s FOR UPDATE",
        advance_cursor=f"UPDATE {c} SET `run_at` = %s, `id` = %s WHERE `queue` = %s AND `priority` = %s",
        # Due pending jobs past each cursor, in claim order (priority, run_at, id). A plain read:
        # a job whose insert commits after a later one was read is left behind the cursor, and the
        # sweep (read_behind) finds it. {skip} (skip_tasks) leaves out the jobs of paused tasks:
        # the cursor passes them, and the look behind takes them once their task is resumed. It is
        # a filter on the rows the dc_due range read visits, not a change of the range.
        read_ahead=(
            "SELECT COUNT(*), JSON_ARRAYAGG(JSON_ARRAY(`priority`, `at`, `id`, `interruptions`)) FROM ("
            f"SELECT `priority`, CAST(`run_at` AS CHAR) AS `at`, `id`, `interruptions` FROM {j} "
            f"FORCE INDEX (`dc_due`) WHERE `dc_state` = {IDLE} AND `queue` = %s{{skip}} "
            "AND `run_at` <= NOW(6) AND "
            + _ahead(PRIORITIES, behind=False)
            + " ORDER BY `priority`, `run_at`, `id` LIMIT %s) AS `due`"
        ),
        # Due pending jobs at or behind each cursor: the live runs' members, and any left behind.
        # Counted first: no more than the runs hold means none was left behind (the usual case).
        count_behind=(
            f"SELECT COUNT(*) FROM {j} FORCE INDEX (`dc_due`) WHERE `dc_state` = {IDLE} AND `queue` = %s"
            "{skip} AND `run_at` <= NOW(6) AND " + _ahead(PRIORITIES, behind=True)
        ),
        read_behind=(
            "SELECT COUNT(*), JSON_ARRAYAGG(JSON_ARRAY(`id`, `priority`, `interruptions`)) FROM ("
            f"SELECT `id`, `priority`, `interruptions` FROM {j} FORCE INDEX (`dc_due`) "
            f"WHERE `dc_state` = {IDLE} AND `queue` = %s{{skip}} AND `run_at` <= NOW(6) AND "
            + _ahead(PRIORITIES, behind=True)
            + " LIMIT %s) AS `behind`"
        ),
    )


def _claiming(n: _RunNames) -> dict[str, str]:
    """Operators' reads of the runs, and a claim's runs: inserted, or made pending again, dispatched."""
    r, c = n.r, n.c
    return dict(
        live_members=f"SELECT `members` FROM {r} FORCE INDEX (`dc_runs`) WHERE `queue` = %s",
        # `duecast jobs discard`: no claim runs meanwhile, and the jobs runs hold are left alone.
        lock_all_cursors=f"SELECT `queue` FROM {c} FOR UPDATE",
        all_members=f"SELECT `members` FROM {r}",
        # `duecast jobs show`: which run, if any, holds a pending job, and how far it has gone.
        all_runs=(
            "SELECT `id`, `dc_state`, `dc_attempt`, `worker`, `started_at`, `lease_until`, `members` "
            f"FROM {r}"
        ),
        # A new run is dispatched at once, under attempt 1 (the claim pushes its entry).
        insert_run=(
            f"INSERT INTO {r} (`queue`, `priority`, `suspects`, `jobs`, `members`, `dc_state`, "
            f"`dc_attempt`, `dc_dispatched_at`) VALUES (%s, %s, %s, %s, %s, {DISPATCHED}, 1, NOW(6))"
        ),
        # Runs made pending again (entry lost, worker died before its start): dispatched first.
        claim_idle=(
            f"SELECT `id`, `dc_attempt`, `jobs` FROM {r} FORCE INDEX (`dc_runs`) WHERE `dc_state` = {IDLE} "
            "AND `queue` = %s ORDER BY `priority`, `id` LIMIT %s FOR UPDATE SKIP LOCKED"
        ),
        mark_dispatched=(
            f"UPDATE {r} FORCE INDEX (PRIMARY) SET `dc_state` = {DISPATCHED}, "
            "`dc_attempt` = `dc_attempt` + 1, "
            "`dc_dispatched_at` = NOW(6) WHERE {ids}"
        ),
    )


def _starting(n: _RunNames) -> dict[str, str]:
    """A worker's start of its runs, their leases, and a finish's fence on the run."""
    r, fenced = n.r, n.fenced
    return dict(
        # Worker start: the entries' runs still DISPATCHED under their attempt, locked.
        lock_dispatched=(
            f"SELECT `id`, `dc_attempt`, `suspects`, `members` FROM {r} FORCE INDEX (PRIMARY) WHERE "
            + fenced.replace("{state}", str(DISPATCHED))
            + " FOR UPDATE"
        ),
        lock_dispatched_skip=(
            f"SELECT `id`, `dc_attempt`, `suspects`, `members` FROM {r} FORCE INDEX (PRIMARY) WHERE "
            + fenced.replace("{state}", str(DISPATCHED))
            + " FOR UPDATE SKIP LOCKED"
        ),
        # ...-> RUNNING with a lease, committed before any of their jobs runs: one write per run.
        # started_at is the start's own NOW(6) (source.START_TIME, read in its transaction).
        mark_running=(
            f"UPDATE {r} FORCE INDEX (PRIMARY) SET `dc_state` = {RUNNING}, `started_at` = %s, "
            "`lease_until` = %s + INTERVAL %s MICROSECOND, `worker` = %s WHERE {ids}"
        ),
        # A start whose COMMIT got no answer: the runs it would have started, if it did (RUNNING
        # under their attempt, by this worker, since that start's time). Locking: it waits for a
        # start still open on a lost session to end. PRIMARY.
        started_by=f"SELECT `id` FROM {r} FORCE INDEX (PRIMARY) WHERE "
        + fenced.replace("{state}", str(RUNNING))
        + " AND `started_at` = %s AND `worker` = %s FOR UPDATE",
        # A start too late to trust its leases: the runs go back to pending, to be dispatched again.
        give_back=f"UPDATE {r} FORCE INDEX (PRIMARY) SET `dc_state` = {IDLE}, `lease_until` = NULL WHERE "
        + fenced.replace("{state}", str(RUNNING)),
        # The lease keeper (shared.storage.leased.keeper.renew_leases), on the runs' rows.
        lock_leased=f"SELECT `id` FROM {r} FORCE INDEX (PRIMARY) WHERE "
        + fenced.replace("{state}", str(RUNNING))
        + " FOR UPDATE SKIP LOCKED",
        extend_lease=(
            f"UPDATE {r} FORCE INDEX (PRIMARY) SET `lease_until` = NOW(6) + INTERVAL %s MICROSECOND WHERE "
            + fenced.replace("{state}", str(RUNNING))
        ),
        leased=f"SELECT `id` FROM {r} FORCE INDEX (PRIMARY) WHERE " + fenced.replace("{state}", str(RUNNING)),
        # A finish's fence: the runs still RUNNING under the attempt the worker started them with,
        # locked for the finish's transaction; a run not found is no longer this worker's. Its
        # started_at is when its members' attempt began: each finish writes it into the job's row.
        lock_running=(
            f"SELECT `id`, `members`, `started_at` FROM {r} FORCE INDEX (PRIMARY) WHERE "
            + fenced.replace("{state}", str(RUNNING))
            + " FOR UPDATE"
        ),
        keep_members=f"UPDATE {r} SET `members` = %s, `jobs` = %s WHERE `id` = %s",
        drop_runs=delete_by_key(r, "{ids}", "`id`"),
    )


def _requeueing(n: _RunNames) -> dict[str, str]:
    """The sweeper's and the supervisor's requeues, releases, and the runs' counts."""
    j, r, fenced = n.j, n.r, n.fenced
    return dict(
        # Sweeper, per queue: dispatched, never started within the visibility timeout.
        expired_dispatched=(
            f"SELECT `id` FROM {r} FORCE INDEX (`dc_runs`) WHERE `dc_state` = {DISPATCHED} AND `queue` = %s "
            "AND `dc_dispatched_at` < NOW(6) - INTERVAL %s MICROSECOND LIMIT %s FOR UPDATE SKIP LOCKED"
        ),
        requeue_dispatched=(
            f"UPDATE {r} FORCE INDEX (PRIMARY) SET `dc_state` = {IDLE} "
            f"WHERE {{ids}} AND `dc_state` = {DISPATCHED}"
        ),
        # Claimed but never pushed, or popped by a worker now dead before its start: pending now.
        release_unpushed=f"UPDATE {r} FORCE INDEX (PRIMARY) SET `dc_state` = {IDLE} WHERE "
        + fenced.replace("{state}", str(DISPATCHED)),
        # Sweeper, per queue: started runs whose lease ran out (their worker died or stalled).
        expired_running=(
            f"SELECT `id`, `members`, `worker`, `started_at` FROM {r} FORCE INDEX (`dc_runs`) "
            f"WHERE `dc_state` = {RUNNING} AND `queue` = %s AND `lease_until` < NOW(6) "
            "LIMIT %s FOR UPDATE SKIP LOCKED"
        ),
        # Supervisor (worker/handback.py): the runs a worker process that exited was running, found
        # by a plain read (dc_runs does not hold `worker`: a locking scan would wait on, and lock,
        # every other worker's running runs of the queue, their lease renewals among them)...
        find_worker_running=(
            f"SELECT `id` FROM {r} FORCE INDEX (`dc_runs`) WHERE `dc_state` = {RUNNING} "
            "AND `queue` = %s AND `worker` = %s LIMIT %s"
        ),
        # ...then locked by primary key, still RUNNING and still that worker's.
        lock_worker_running=(
            f"SELECT `id`, `members`, `worker`, `started_at` FROM {r} FORCE INDEX (PRIMARY) "
            f"WHERE {{ids}} AND `dc_state` = {RUNNING} AND `worker` = %s FOR UPDATE"
        ),
        # Only with no dispatcher or worker running: every run of the queue goes, and its jobs,
        # pending and behind the cursors, are found by the next claim's sweep.
        release=f"DELETE FROM {r} WHERE `queue` = %s",
        # Jobs a duecast before runs left dispatched or running on their own rows.
        release_legacy=(
            f"UPDATE {j} SET `dc_state` = {IDLE}, `lease_until` = NULL "
            f"WHERE `dc_state` IN ({DISPATCHED}, {RUNNING}) AND `queue` = %s"
        ),
        # ...and the sweeper's, for those a duecast before runs left when it stopped: dispatched
        # past the visibility timeout, or running past its lease. Pending again now, ahead of the
        # cursor. (Empty after an upgrade's first sweep: two index dives.)
        requeue_legacy=(
            f"UPDATE {j} FORCE INDEX (`dc_due`) "
            f"SET `dc_state` = {IDLE}, `run_at` = NOW(6), `lease_until` = NULL "
            f"WHERE `queue` = %s AND ((`dc_state` = {DISPATCHED} AND `dc_dispatched_at` < "
            f"NOW(6) - INTERVAL %s MICROSECOND) OR (`dc_state` = {RUNNING} AND `lease_until` < NOW(6)))"
        ),
        in_flight=(
            f"SELECT `dc_state`, COALESCE(SUM(`jobs`), 0) FROM {r} FORCE INDEX (`dc_runs`) "
            "WHERE `queue` = %s GROUP BY `dc_state`"
        ),
        jobs_of_runs=f"SELECT COALESCE(SUM(`jobs`), 0) FROM {r} FORCE INDEX (PRIMARY) WHERE {{ids}}",
        jobs_in_runs=f"SELECT COALESCE(SUM(`jobs`), 0) FROM {r} WHERE `queue` = %s",
    )


def _members(n: _RunNames) -> dict[str, str]:
    """A run's members: read at its start, and finished, failed or interrupted one by one."""
    j, cols, member, finished = n.j, n.cols, n.member, n.finished
    ran = "`worker` = %s, `started_at` = %s"  # the run's worker and started_at, as parameters
    jp = f"{j} FORCE INDEX (PRIMARY)"  # by id: a small table's scan would wait on others' rows
    return dict(
        member_interruptions=f"SELECT `id`, `interruptions` FROM {j} FORCE INDEX (PRIMARY) WHERE " + member,
        # A start's read of its members, as one packed value (shared.storage.packed).
        member_rows=(
            f"SELECT COUNT(*), JSON_ARRAYAGG(JSON_ARRAY({cols})) FROM {j} FORCE INDEX (PRIMARY) WHERE "
            + member
        ),
        member_rows_plain=f"SELECT {cols} FROM {j} FORCE INDEX (PRIMARY) WHERE " + member,
        finish_delete=delete_by_key(j, member, "`id`"),
        # Every finish that keeps the row records the worker that ran it and when its run started
        # (`ran`: a job's own row is not written while its run runs), and counts the run.
        finish_done=(
            f"UPDATE {jp} SET `dc_state` = {DONE}, `dc_attempt` = `dc_attempt` + 1, {ran}, {finished} "
            "WHERE " + member
        ),
        # One done member whose task returned a value: kept with it (jobs.retention_s > 0 only).
        finish_done_result=(
            f"UPDATE {jp} SET `dc_state` = {DONE}, `dc_attempt` = `dc_attempt` + 1, `worker` = %s, "
            f"`result` = %s, `last_error` = %s, {finished} WHERE " + member
        ),
        # A failed member with attempts left: pending again after the backoff (ahead of the cursor).
        # dc_attempt counts a job's ended runs: the next run is attempt dc_attempt + 1.
        fail_retry=(
            f"UPDATE {jp} SET `errors` = `errors` + 1, `dc_attempt` = `dc_attempt` + 1, {ran}, "
            "`run_at` = NOW(6) + INTERVAL %s MICROSECOND, `last_error` = %s WHERE " + member
        ),
        fail_dead=(
            f"UPDATE {jp} SET `dc_state` = {DEAD}, `errors` = `errors` + %s, "
            "`dc_attempt` = `dc_attempt` + 1, "
            f"{ran}, `last_error` = %s, {finished} WHERE " + member
        ),
        snooze_delay=(
            f"UPDATE {jp} SET `dc_attempt` = `dc_attempt` + 1, {ran}, "
            "`run_at` = NOW(6) + INTERVAL %s MICROSECOND WHERE " + member
        ),
        snooze_at=(
            f"UPDATE {jp} SET `dc_attempt` = `dc_attempt` + 1, {ran}, "
            "`run_at` = CONVERT_TZ(%s, '+00:00', @@session.time_zone) WHERE " + member
        ),
        # Members of a run whose lease ran out: each interruption counts (shared.policy)...
        interrupted_retry=(
            f"UPDATE {jp} SET `interruptions` = `interruptions` + 1, `dc_attempt` = `dc_attempt` + 1, "
            f"{ran}, `run_at` = NOW(6), `last_error` = %s WHERE " + member
        ),
        interrupted_dead=(
            f"UPDATE {jp} SET `dc_state` = {DEAD}, `interruptions` = `interruptions` + 1, "
            f"`dc_attempt` = `dc_attempt` + 1, {ran}, `last_error` = %s, {finished} WHERE " + member
        ),
        # ...or, excused (shared.blame_policy: a fleet-wide event, not the job's doing), not counted.
        interrupted_excused=(
            f"UPDATE {jp} SET `dc_attempt` = `dc_attempt` + 1, {ran}, `run_at` = NOW(6), `last_error` = %s "
            "WHERE " + member
        ),
    )


def skip_tasks(statement: str, tasks: int) -> str:
    """A claim's read with `tasks` paused tasks left out (their names: parameters after the queue's),
    or as it was when none is paused."""
    if tasks == 0:
        return statement.replace("{skip}", "")
    return statement.replace("{skip}", " AND `task` NOT IN (" + ", ".join(["%s"] * tasks) + ")")


def cursor_rows(queue: str) -> tuple[str, tuple[object, ...]]:
    """The VALUES and arguments of ensure_cursors for one queue: a cursor per priority, before all."""
    values = ", ".join(["(%s, %s, %s, 0)"] * len(PRIORITIES))
    args: list[object] = []
    for p in PRIORITIES:
        args += [queue, p, NEVER]
    return values, tuple(args)
