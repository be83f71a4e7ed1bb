"""The SQL of a cluster group's deliveries: claim, start, finish and sweep, each named, with the index
it relies on. Composed into TopicSQL by shared.queries.topics; `{fence}` / `{where}` placeholders are
rendered from Python ints only (shared.queries.source).
"""

from __future__ import annotations

from .topic_names import DEAD, DISPATCHED, DONE, IDLE, RUNNING, TopicNames


def claiming(n: TopicNames) -> dict[str, str]:
    """Claim, per cluster group (dispatcher)."""
    m, g, d = n.m, n.g, n.d
    return dict(
        # Due pending deliveries (retries, replays, requeued ones): dc_due (state, group, run_at).
        claim_due=(
            f"SELECT `seq`, `dc_attempt` FROM {d} FORCE INDEX (`dc_due`) WHERE `dc_state` = {IDLE} "
            "AND `group_id` = %s AND `run_at` <= NOW(6) ORDER BY `run_at`, `seq` LIMIT %s "
            "FOR UPDATE SKIP LOCKED"
        ),
        mark_dispatched=(
            f"UPDATE {d} SET `dc_state` = {DISPATCHED}, `dc_attempt` = `dc_attempt` + 1, "
            "`dc_dispatched_at` = NOW(6) WHERE `group_id` = %s AND {ids}"
        ),
        # New messages: the group row's lock serialises dispatchers (a second one skips the
        # group for this tick); deliveries are born DISPATCHED, so a new message costs one write.
        lock_group=f"SELECT `position` FROM {g} WHERE `id` = %s FOR UPDATE SKIP LOCKED",
        # The first message after a position (one PRIMARY dive). From it up to the topic's committed
        # last_seq every id exists: ids are gap-free and retention deletes only prefixes.
        first_after=f"SELECT MIN(`seq`) FROM {m} WHERE `topic_id` = %s AND `seq` > %s",
        materialise=(
            f"INSERT INTO {d} (`group_id`, `seq`, `dc_state`, `dc_attempt`, `dc_dispatched_at`, `run_at`) "
            f"SELECT %s, `seq`, {DISPATCHED}, 1, NOW(6), NOW(6) FROM {m} "
            "WHERE `topic_id` = %s AND `seq` >= %s AND `seq` <= %s"
        ),
        made_between=f"SELECT `seq` FROM {d} WHERE `group_id` = %s AND `seq` >= %s AND `seq` <= %s",
        advance_group=f"UPDATE {g} SET `position` = %s, `skipped` = `skipped` + %s WHERE `id` = %s",
    )


def starting(n: TopicNames) -> dict[str, str]:
    """Start (worker): as for jobs, committed RUNNING with a lease; PRIMARY (group, seq)."""
    m, d, running, msg_cols = n.m, n.d, n.running, n.msg_cols
    return dict(
        lock_dispatched=(
            f"SELECT `seq`, `dc_attempt`, `errors`, `interruptions` FROM {d} FORCE INDEX (PRIMARY) "
            f"WHERE `group_id` = %s AND {{fence}} AND `dc_state` = {DISPATCHED} FOR UPDATE"
        ),
        lock_dispatched_skip=(
            f"SELECT `seq`, `dc_attempt`, `errors`, `interruptions` FROM {d} FORCE INDEX (PRIMARY) "
            f"WHERE `group_id` = %s AND {{fence}} AND `dc_state` = {DISPATCHED} FOR UPDATE SKIP LOCKED"
        ),
        # started_at is the start's own NOW(6) (source.START_TIME, read in its transaction).
        mark_running=(
            f"UPDATE {d} SET `dc_state` = {RUNNING}, `started_at` = %s, "
            "`lease_until` = %s + INTERVAL %s MICROSECOND, `worker` = %s WHERE `group_id` = %s AND {ids}"
        ),
        # A start whose COMMIT got no answer: the deliveries it would have started, if it did
        # (RUNNING under their attempt, by this worker, since that start's time); locking, so a start
        # still open on a lost session ends first. PRIMARY.
        started_by=(
            f"SELECT `seq` FROM {d} FORCE INDEX (PRIMARY) WHERE "
            + running.replace("{where}", "{fence}")
            + " AND `started_at` = %s AND `worker` = %s FOR UPDATE"
        ),
        # The messages themselves: a plain (consistent, lock-free) read, so groups never contend.
        read_messages=f"SELECT {msg_cols} FROM {m} WHERE `topic_id` = %s AND {{ids}}",
        # The lease keeper, as for jobs: lock what is still ours (skipping rows another session
        # holds), extend it, and read which of the rest are still ours (the others are lost).
        lock_leased=(
            f"SELECT `seq` FROM {d} FORCE INDEX (PRIMARY) WHERE "
            + running.replace("{where}", "{fence}")
            + " FOR UPDATE SKIP LOCKED"
        ),
        extend_lease=(
            f"UPDATE {d} FORCE INDEX (PRIMARY) SET `lease_until` = NOW(6) + INTERVAL %s MICROSECOND "
            "WHERE " + running.replace("{where}", "{fence}")
        ),
        leased=f"SELECT `seq` FROM {d} FORCE INDEX (PRIMARY) WHERE " + running.replace("{where}", "{fence}"),
    )


def finishing(n: TopicNames) -> dict[str, str]:
    """Finish: every statement fenced on (seq, attempt) and RUNNING; PRIMARY."""
    d, a, running, finished = n.d, n.a, n.running, n.finished
    return dict(
        finish_done=(
            f"UPDATE {d} FORCE INDEX (PRIMARY) SET `dc_state` = {DONE}, {finished} "
            "WHERE " + running.replace("{where}", "{fence}")
        ),
        # The trace of an attempt that did not end as done, written before the row moves on.
        record_attempt=(
            f"INSERT IGNORE INTO {a} (`group_id`, `seq`, `attempt`, `outcome`, `worker`, `dispatched_at`, "
            "`started_at`, `ended_at`, `error`) SELECT `group_id`, `seq`, `dc_attempt`, %s, `worker`, "
            f"`dc_dispatched_at`, `started_at`, NOW(6), %s FROM {d} FORCE INDEX (PRIMARY) "
            "WHERE `group_id` = %s AND {where} AND `dc_state` = %s"
        ),
        fail_retry=(
            f"UPDATE {d} FORCE INDEX (PRIMARY) SET `dc_state` = {IDLE}, `errors` = `errors` + 1, "
            "`run_at` = NOW(6) + INTERVAL %s MICROSECOND, `last_error` = %s, `lease_until` = NULL "
            "WHERE " + running.replace("{where}", "{fence}")
        ),
        fail_dead=(
            f"UPDATE {d} FORCE INDEX (PRIMARY) SET `dc_state` = {DEAD}, `errors` = `errors` + %s, "
            f"`last_error` = %s, {finished} WHERE " + running.replace("{where}", "{fence}")
        ),
        snooze_delay=(
            f"UPDATE {d} FORCE INDEX (PRIMARY) SET `dc_state` = {IDLE}, "
            "`run_at` = NOW(6) + INTERVAL %s MICROSECOND, `lease_until` = NULL "
            "WHERE " + running.replace("{where}", "{fence}")
        ),
        snooze_at=(
            f"UPDATE {d} FORCE INDEX (PRIMARY) SET `dc_state` = {IDLE}, "
            "`run_at` = CONVERT_TZ(%s, '+00:00', @@session.time_zone), `lease_until` = NULL "
            "WHERE " + running.replace("{where}", "{fence}")
        ),
        release_unpushed=(
            f"UPDATE {d} FORCE INDEX (PRIMARY) SET `dc_state` = {IDLE} "
            f"WHERE `group_id` = %s AND {{fence}} AND `dc_state` = {DISPATCHED}"
        ),
    )


def sweeping(n: TopicNames) -> dict[str, str]:
    """Sweep: the dc_due prefixes (1, group) and (2, group) hold only deliveries in flight."""
    d, running, finished = n.d, n.running, n.finished
    return dict(
        find_expired_dispatched=(
            f"SELECT `seq` FROM {d} FORCE INDEX (`dc_due`) WHERE `dc_state` = {DISPATCHED} "
            "AND `group_id` = %s AND `dc_dispatched_at` < NOW(6) - INTERVAL %s MICROSECOND "
            "LIMIT %s FOR UPDATE SKIP LOCKED"
        ),
        requeue_dispatched=(
            f"UPDATE {d} SET `dc_state` = {IDLE} "
            f"WHERE `group_id` = %s AND {{ids}} AND `dc_state` = {DISPATCHED}"
        ),
        find_expired_running=(
            f"SELECT `seq`, `interruptions`, `worker`, `started_at` FROM {d} FORCE INDEX (`dc_due`) "
            f"WHERE `dc_state` = {RUNNING} "
            "AND `group_id` = %s AND `lease_until` < NOW(6) LIMIT %s FOR UPDATE SKIP LOCKED"
        ),
        interrupted_retry=(
            f"UPDATE {d} SET `dc_state` = {IDLE}, `interruptions` = `interruptions` + 1, `run_at` = NOW(6), "
            "`lease_until` = NULL, `last_error` = %s WHERE " + running.replace("{where}", "{ids}")
        ),
        interrupted_dead=(
            f"UPDATE {d} SET `dc_state` = {DEAD}, `interruptions` = `interruptions` + 1, `last_error` = %s, "
            f"{finished} WHERE " + running.replace("{where}", "{ids}")
        ),
        # Excused (shared.blame_policy: a fleet-wide event), pending again without counting it.
        interrupted_excused=(
            f"UPDATE {d} SET `dc_state` = {IDLE}, `run_at` = NOW(6), `lease_until` = NULL, `last_error` = %s "
            "WHERE " + running.replace("{where}", "{ids}")
        ),
        # Supervisor, as for jobs: a plain read of the (RUNNING, group) prefix for an exited worker's
        # deliveries, then a lock of those still its own by PRIMARY (group, seq).
        find_worker_running=(
            f"SELECT `seq` FROM {d} FORCE INDEX (`dc_due`) WHERE `dc_state` = {RUNNING} "
            "AND `group_id` = %s AND `worker` = %s LIMIT %s"
        ),
        lock_worker_running=(
            f"SELECT `seq`, `interruptions`, `worker`, `started_at` FROM {d} FORCE INDEX (PRIMARY) "
            "WHERE " + running.replace("{where}", "{ids}") + " AND `worker` = %s FOR UPDATE"
        ),
        release_all=(
            f"UPDATE {d} SET `dc_state` = {IDLE}, `lease_until` = NULL "
            f"WHERE `group_id` = %s AND `dc_state` IN ({DISPATCHED}, {RUNNING})"
        ),
    )
