"""SQL of concurrency keys' claims (`[jobs.key_limits.<queue>]`): a key-limited queue's jobs of a key
are claimed key by key, in turn, into runs naming the key; its jobs of no key keep the queue's
cursors. Rendered only for such a queue: elsewhere the queue's claim is byte for byte as before."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from ..identifiers import quote
from .job_runs import RunSQL
from .jobs import DISPATCHED, IDLE, PRIORITIES, RUNNING

# The queue's own reads of due jobs, by dc_due: in a key-limited queue the same ranges of its jobs
# of no key, by dc_key (`concurrency_key` IS NULL is one more equality of the index's prefix).
_DUE_SCOPE = f"FORCE INDEX (`dc_due`) WHERE `dc_state` = {IDLE} AND `queue` = %s"
_NO_KEY_SCOPE = (
    f"FORCE INDEX (`dc_key`) WHERE `dc_state` = {IDLE} AND `queue` = %s AND `concurrency_key` IS NULL"
)
_IDLE_RUNS = "AND `queue` = %s ORDER BY"


@dataclass(frozen=True)
class KeyRunSQL:
    next_key: str
    first_key: str
    key_runs: str
    claim_idle: str
    read_due: str
    insert_run: str
    unkeyed_members: str


def render_key_runs(jobs_table: str, runs_table: str) -> KeyRunSQL:
    j, r = quote(jobs_table), quote(runs_table)
    # One range of dc_key per priority: a key's jobs due now, never its later ones in between.
    due = "(" + " OR ".join(f"(`priority` = {p} AND `run_at` <= NOW(6))" for p in PRIORITIES) + ")"
    return KeyRunSQL(
        # Round robin: the next key after the last one served with a pending job (args: queue, key),
        # one dive into dc_key; first_key starts the round again (args: queue).
        next_key=(
            f"SELECT `concurrency_key` FROM {j} FORCE INDEX (`dc_key`) WHERE `dc_state` = {IDLE} "
            "AND `queue` = %s AND `concurrency_key` > %s ORDER BY `concurrency_key` LIMIT 1"
        ),
        first_key=(
            f"SELECT `concurrency_key` FROM {j} FORCE INDEX (`dc_key`) WHERE `dc_state` = {IDLE} "
            "AND `queue` = %s AND `concurrency_key` IS NOT NULL ORDER BY `concurrency_key` LIMIT 1"
        ),
        # Every run of one key (args: queue, key): whether it counts as in flight (dispatched, or
        # started under a live lease: a dead worker's stop counting when their leases run out; a
        # dispatched one counts until the sweeper makes it pending, however old: a worker may still
        # start it), how many jobs it holds, and which (what the key's read of due jobs reads past).
        key_runs=(
            f"SELECT `dc_state`, `jobs`, `members`, (`dc_state` = {DISPATCHED} OR (`dc_state` = {RUNNING} "
            f"AND `lease_until` > NOW(6))) FROM {r} FORCE INDEX (`dc_key`) WHERE `queue` = %s "
            "AND `concurrency_key` = %s"
        ),
        # Its runs made pending again (entry lost, worker died before its start), taken whole when
        # they fit (args: queue, key).
        claim_idle=(
            f"SELECT `id`, `dc_attempt`, `jobs` FROM {r} FORCE INDEX (`dc_key`) WHERE `queue` = %s "
            f"AND `concurrency_key` = %s AND `dc_state` = {IDLE} ORDER BY `priority`, `id` "
            "FOR UPDATE SKIP LOCKED"
        ),
        # A key's due pending jobs in claim order (args: queue, key, paused tasks..., limit); the
        # members of its runs among them are dropped by the caller. {skip}: shared.queries.job_runs.
        read_due=(
            "SELECT COUNT(*), JSON_ARRAYAGG(JSON_ARRAY(`id`, `priority`, `at`, `interruptions`)) FROM ("
            f"SELECT `id`, `priority`, CAST(`run_at` AS CHAR) AS `at`, `interruptions` FROM {j} "
            f"FORCE INDEX (`dc_key`) WHERE `dc_state` = {IDLE} AND `queue` = %s AND `concurrency_key` = %s"
            f"{{skip}} AND {due} ORDER BY `priority`, `run_at`, `id` LIMIT %s) AS `due`"
        ),
        insert_run=(
            f"INSERT INTO {r} (`queue`, `priority`, `suspects`, `jobs`, `members`, `concurrency_key`, "
            f"`dc_state`, `dc_attempt`, `dc_dispatched_at`) VALUES (%s, %s, %s, %s, %s, %s, {DISPATCHED}, 1, "
            "NOW(6))"
        ),
        # The queue's runs of no key (args: queue): one made before the limit was set may hold
        # jobs of a key, which are then never claimed twice.
        unkeyed_members=(
            f"SELECT `members` FROM {r} FORCE INDEX (`dc_key`) WHERE `queue` = %s "
            "AND `concurrency_key` IS NULL"
        ),
    )


def unkeyed(runs: RunSQL) -> RunSQL:
    """A key-limited queue's own claim: its cursors' reads, its pending runs and its count of jobs in
    runs take its jobs of no key only (a key's are the key claims'), by the same ranges of dc_key."""

    def scoped(stmt: str, old: str, new: str) -> str:
        if stmt.count(old) != 1:
            raise AssertionError(f"a claim statement changed shape: {stmt[:80]}")
        return stmt.replace(old, new)

    return dataclasses.replace(
        runs,
        read_ahead=scoped(runs.read_ahead, _DUE_SCOPE, _NO_KEY_SCOPE),
        count_behind=scoped(runs.count_behind, _DUE_SCOPE, _NO_KEY_SCOPE),
        read_behind=scoped(runs.read_behind, _DUE_SCOPE, _NO_KEY_SCOPE),
        claim_idle=scoped(
            runs.claim_idle, _IDLE_RUNS, "AND `queue` = %s AND `concurrency_key` IS NULL ORDER BY"
        ),
        jobs_in_runs=runs.jobs_in_runs + " AND `concurrency_key` IS NULL",
    )
