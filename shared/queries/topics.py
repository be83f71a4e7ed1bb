"""Every SQL statement on the topics tables, each named, with the index it relies on.

Table names come from validated settings; values are parameters; `{ids}` / `{fence}` placeholders are
rendered from Python ints only (shared.queries.source). Times are NOW(6) on the server, shifted by
microseconds.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..identifiers import quote
from ..settings import TopicsSettings
from ..states import State

IDLE, DISPATCHED, RUNNING, DONE, DEAD = (int(s) for s in State)
UNFINISHED = f"{IDLE}, {DISPATCHED}, {RUNNING}"
# What a worker reads of a delivery it starts (the message's own columns are read apart, unlocked).
DELIVERY_COLUMNS = ("seq", "dc_attempt", "errors", "interruptions")
MESSAGE_COLUMNS = ("seq", "msg_key", "payload", "created_at")
TRACE_COLUMNS = (
    "dc_state",
    "dc_attempt",
    "errors",
    "interruptions",
    "replays",
    "run_at",
    "dc_dispatched_at",
    "started_at",
    "worker",
    "finished_at",
    "last_error",
)
ATTEMPT_COLUMNS = ("attempt", "outcome", "worker", "dispatched_at", "started_at", "ended_at", "error")


@dataclass(frozen=True)
class TopicSQL:
    ensure_topic: str
    topic_row: str
    reserve: str
    reserved: str
    insert_message: str
    insert_values: str
    pos_latest: str
    pos_earliest: str
    pos_time: str
    ensure_group: str
    group_row: str
    claim_due: str
    mark_dispatched: str
    lock_group: str
    first_after: str
    materialise: str
    made_between: str
    advance_group: str
    lock_dispatched: str
    lock_dispatched_skip: str
    mark_running: str
    read_messages: str
    lock_leased: str
    extend_lease: str
    leased: str
    finish_done: str
    record_attempt: str
    fail_retry: str
    fail_dead: str
    snooze_delay: str
    snooze_at: str
    release_unpushed: str
    find_expired_dispatched: str
    requeue_dispatched: str
    find_expired_running: str
    interrupted_retry: str
    interrupted_dead: str
    find_worker_running: str
    lock_worker_running: str
    release_all: str
    count_state: str
    count_due: str
    oldest_unfinished: str
    message_age: str
    group_head: str
    timeouts: str
    member_join: str
    member_take: str
    member_row: str
    read_from: str
    member_advance: str
    member_beat: str
    member_leave: str
    members_of: str
    lock_groups_shared: str
    prune_scan: str
    prune_deliveries: str
    prune_attempts: str
    prune_messages: str
    topics_all: str
    groups_all: str
    first_since: str
    show_message: str
    find_by_key: str
    trace: str
    attempts_of: str
    archive_done: str
    requeue_range: str
    lock_group_wait: str
    count_range: str
    set_position: str
    member_reset: str


def render_topics(topics: TopicsSettings) -> TopicSQL:
    t, m, g = (quote(topics.table(k)) for k in ("topics", "messages", "groups"))
    d, a, mb = (quote(topics.table(k)) for k in ("deliveries", "attempts", "members"))
    # A delivery of group %s matched by `{where}` (a fence or an id list) in state `{state}`.
    one_group = "`group_id` = %s AND {where}"
    running = f"{one_group} AND `dc_state` = {RUNNING}"
    finished = "`finished_at` = NOW(6), `lease_until` = NULL"
    revive = "`dc_state` >= " + str(DONE)  # done or dead: a replay makes these pending again
    msg_cols = ", ".join(quote(c) for c in MESSAGE_COLUMNS)
    return TopicSQL(
        # -- publishing -------------------------------------------------------------------------
        ensure_topic=f"INSERT IGNORE INTO {t} (`name`) VALUES (%s)",
        topic_row=f"SELECT `id`, `last_seq` FROM {t} WHERE `name` = %s",
        # Reserve n ids. The row lock is held until the publisher commits, so a second publisher
        # of the topic waits: ids are gap-free and commit in order (positions are safe to keep).
        reserve=f"UPDATE {t} SET `last_seq` = `last_seq` + %s WHERE `id` = %s",
        reserved=f"SELECT `last_seq` FROM {t} WHERE `id` = %s",
        insert_message=f"INSERT INTO {m} (`topic_id`, `seq`, `msg_key`, `payload`, `created_at`) VALUES ",
        insert_values="(%s, %s, %s, %s, NOW(6))",
        # -- where a new group (or broadcast member) starts: the id before its first message ----
        pos_latest=f"SELECT `last_seq` FROM {t} WHERE `id` = %s",
        pos_earliest=f"SELECT MIN(`seq`) - 1 FROM {m} WHERE `topic_id` = %s",  # PRIMARY: one dive
        # dc_time: the first message published at or after a UTC time (ids follow commit order).
        pos_time=(
            f"SELECT `seq` - 1 FROM {m} FORCE INDEX (`dc_time`) WHERE `topic_id` = %s "
            "AND `created_at` >= CONVERT_TZ(%s, '+00:00', @@session.time_zone) "
            "ORDER BY `created_at`, `seq` LIMIT 1"
        ),
        ensure_group=(
            f"INSERT IGNORE INTO {g} (`topic_id`, `name`, `mode`, `position`) VALUES (%s, %s, %s, %s)"
        ),
        group_row=f"SELECT `id`, `position` FROM {g} WHERE `topic_id` = %s AND `name` = %s",
        # -- claim, per cluster group (dispatcher) ----------------------------------------------
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
        # -- start (worker): as for jobs, committed RUNNING with a lease; PRIMARY (group, seq) ----
        lock_dispatched=(
            f"SELECT `seq`, `dc_attempt`, `errors`, `interruptions` FROM {d} FORCE INDEX (PRIMARY) "
            f"WHERE `group_id` = %s AND {{fence}} AND `dc_state` = {DISPATCHED} FOR UPDATE"
        ),
        lock_dispatched_skip=(
            f"SELECT `seq`, `dc_attempt`, `errors`, `interruptions` FROM {d} FORCE INDEX (PRIMARY) "
            f"WHERE `group_id` = %s AND {{fence}} AND `dc_state` = {DISPATCHED} FOR UPDATE SKIP LOCKED"
        ),
        mark_running=(
            f"UPDATE {d} SET `dc_state` = {RUNNING}, `started_at` = NOW(6), "
            "`lease_until` = NOW(6) + INTERVAL %s MICROSECOND, `worker` = %s WHERE `group_id` = %s AND {ids}"
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
        # -- finish: every statement fenced on (seq, attempt) and RUNNING; PRIMARY ---------------
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
        # -- sweep: the dc_due prefixes (1, group) and (2, group) hold only deliveries in flight -----
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
        # -- status: dc_due prefix counts, capped ------------------------------------------------
        count_state=(
            f"SELECT COUNT(*) FROM (SELECT 1 FROM {d} FORCE INDEX (`dc_due`) "
            "WHERE `dc_state` = %s AND `group_id` = %s LIMIT %s) AS n"
        ),
        count_due=(
            f"SELECT COUNT(*) FROM (SELECT 1 FROM {d} FORCE INDEX (`dc_due`) WHERE `dc_state` = {IDLE} "
            "AND `group_id` = %s AND `run_at` <= NOW(6) LIMIT %s) AS n"
        ),
        # The oldest message a group has not finished: among its unfinished deliveries (pending
        # and in flight: few, as deliveries are born dispatched), else the first not materialised.
        oldest_unfinished=(
            f"SELECT MIN(`seq`) FROM {d} FORCE INDEX (`dc_due`) "
            f"WHERE `dc_state` IN ({UNFINISHED}) AND `group_id` = %s"
        ),
        message_age=(
            f"SELECT TIMESTAMPDIFF(MICROSECOND, `created_at`, NOW(6)) FROM {m} "
            "WHERE `topic_id` = %s AND `seq` >= %s ORDER BY `seq` LIMIT 1"
        ),
        group_head=(
            f"SELECT `g`.`position`, `t`.`last_seq`, `g`.`skipped` FROM {g} AS `g` "
            f"JOIN {t} AS `t` ON `t`.`id` = `g`.`topic_id` WHERE `g`.`id` = %s"
        ),
        # Consumption timeouts: messages in flight longer than the group's timeout_s, one per batch.
        # A worker marks its whole batch running at once (one `started_at`, its `worker`) and runs
        # the handlers in turn, so only the first of a batch has surely been running that long;
        # the others may be waiting behind it, or be done and waiting for the batch's ack.
        timeouts=(
            "SELECT COUNT(DISTINCT `worker`, `started_at`), "
            "TIMESTAMPDIFF(MICROSECOND, MIN(`started_at`), NOW(6)) "
            f"FROM {d} FORCE INDEX (`dc_due`) WHERE `dc_state` = {RUNNING} AND `group_id` = %s "
            "AND `started_at` < NOW(6) - INTERVAL %s MICROSECOND"
        ),
        # -- broadcast members: each owns its row (owner = host:pid, kept alive by heartbeats) ------
        member_join=(
            f"INSERT IGNORE INTO {mb} (`group_id`, `name`, `position`, `heartbeat_at`) "
            "VALUES (%s, %s, %s, NOW(6))"
        ),
        # Take the member if nobody holds it, we do, or its holder stopped beating.
        member_take=(
            f"UPDATE {mb} SET `owner` = %s, `heartbeat_at` = NOW(6) WHERE `group_id` = %s AND `name` = %s "
            "AND (`owner` IS NULL OR `owner` = %s OR `heartbeat_at` < NOW(6) - INTERVAL %s MICROSECOND)"
        ),
        member_row=f"SELECT `position`, `owner` FROM {mb} WHERE `group_id` = %s AND `name` = %s",
        read_from=(
            f"SELECT {msg_cols} FROM {m} WHERE `topic_id` = %s AND `seq` > %s ORDER BY `seq` LIMIT %s"
        ),
        # Fenced on owner and the position it read from: a reset or a takeover makes it miss.
        member_advance=(
            f"UPDATE {mb} SET `position` = %s, `heartbeat_at` = NOW(6), `handled` = `handled` + %s, "
            "`failed` = `failed` + %s, `skipped` = `skipped` + %s "
            "WHERE `group_id` = %s AND `name` = %s AND `owner` = %s AND `position` = %s"
        ),
        member_beat=(
            f"UPDATE {mb} SET `heartbeat_at` = NOW(6) WHERE `group_id` = %s AND `name` = %s AND `owner` = %s"
        ),
        member_leave=f"UPDATE {mb} SET `owner` = NULL WHERE `group_id` = %s AND `name` = %s AND `owner` = %s",
        # Each member and whether it heartbeated within member_ttl_s: it holds retention then (a
        # restarted process resumes it without a gap); it is live only while an owner holds it too.
        members_of=(
            "SELECT `name`, `position`, `owner`, "
            "`heartbeat_at` >= NOW(6) - INTERVAL %s MICROSECOND, `handled`, `failed`, `skipped` "
            f"FROM {mb} WHERE `group_id` = %s ORDER BY `name`"
        ),
        # -- retention: the oldest messages of a topic, deleted a prefix of ids at a time ----------
        # The pruner holds its topic's group rows shared while it decides and deletes: a replay
        # (which locks its group row) cannot revive deliveries of messages being deleted.
        lock_groups_shared=f"SELECT `id` FROM {g} WHERE `topic_id` = %s LOCK IN SHARE MODE",
        prune_scan=(
            "SELECT `seq`, `created_at` < NOW(6) - INTERVAL %s MICROSECOND "
            f"FROM {m} WHERE `topic_id` = %s AND `seq` <= %s ORDER BY `seq` LIMIT %s"
        ),
        prune_deliveries=f"DELETE FROM {d} WHERE `group_id` = %s AND `seq` <= %s",
        prune_attempts=f"DELETE FROM {a} WHERE `group_id` = %s AND `seq` <= %s",
        prune_messages=f"DELETE FROM {m} WHERE `topic_id` = %s AND `seq` <= %s",
        # -- operators ------------------------------------------------------------------------------
        topics_all=f"SELECT `id`, `name`, `last_seq` FROM {t} ORDER BY `name`",
        groups_all=f"SELECT `id`, `topic_id`, `name`, `mode`, `position`, `skipped` FROM {g} ORDER BY `name`",
        # Volume: ids are gap-free, so "published since" is last_seq minus the first id since.
        first_since=(
            f"SELECT `seq` FROM {m} FORCE INDEX (`dc_time`) WHERE `topic_id` = %s "
            "AND `created_at` >= NOW(6) - INTERVAL %s MICROSECOND ORDER BY `created_at`, `seq` LIMIT 1"
        ),
        show_message=f"SELECT {msg_cols} FROM {m} WHERE `topic_id` = %s AND `seq` = %s",
        find_by_key=(
            f"SELECT {msg_cols} FROM {m} FORCE INDEX (`dc_key`) WHERE `topic_id` = %s AND `msg_key` = %s "
            "ORDER BY `seq` DESC LIMIT %s"
        ),
        trace=(
            f"SELECT {', '.join(quote(c) for c in TRACE_COLUMNS)} FROM {d} "
            "WHERE `group_id` = %s AND `seq` = %s"
        ),
        attempts_of=(
            f"SELECT {', '.join(quote(c) for c in ATTEMPT_COLUMNS)} FROM {a} "
            "WHERE `group_id` = %s AND `seq` = %s ORDER BY `attempt`"
        ),
        # Replay, one page of ids: keep the done outcome in the trace, then make every delivery of
        # the page pending again (done or dead ones revived, missing ones created; ones pending or
        # in flight are left alone). ON DUPLICATE KEY UPDATE assigns left to right: dc_state last.
        archive_done=(
            f"INSERT IGNORE INTO {a} (`group_id`, `seq`, `attempt`, `outcome`, `worker`, `dispatched_at`, "
            "`started_at`, `ended_at`, `error`) SELECT `group_id`, `seq`, `dc_attempt`, 'done', `worker`, "
            f"`dc_dispatched_at`, `started_at`, `finished_at`, NULL FROM {d} "
            f"WHERE `group_id` = %s AND `seq` > %s AND `seq` <= %s AND `dc_state` = {DONE}"
        ),
        requeue_range=(
            f"INSERT INTO {d} (`group_id`, `seq`, `dc_state`, `dc_attempt`, `run_at`) "
            f"SELECT %s, `seq`, {IDLE}, 0, NOW(6) FROM {m} "
            "WHERE `topic_id` = %s AND `seq` > %s AND `seq` <= %s "
            f"ON DUPLICATE KEY UPDATE `errors` = IF({revive}, 0, `errors`), "
            f"`interruptions` = IF({revive}, 0, `interruptions`), "
            f"`replays` = `replays` + IF({revive}, 1, 0), "
            f"`run_at` = IF({revive}, NOW(6), `run_at`), `finished_at` = IF({revive}, NULL, `finished_at`), "
            f"`last_error` = IF({revive}, NULL, `last_error`), `dc_state` = IF({revive}, {IDLE}, `dc_state`)"
        ),
        lock_group_wait=f"SELECT `position` FROM {g} WHERE `id` = %s FOR UPDATE",
        count_range=f"SELECT COUNT(*) FROM {m} WHERE `topic_id` = %s AND `seq` > %s AND `seq` <= %s",
        set_position=f"UPDATE {g} SET `position` = %s, `reset_at` = NOW(6) WHERE `id` = %s",
        member_reset=(
            f"UPDATE {mb} SET `position` = %s WHERE `group_id` = %s AND (%s IS NULL OR `name` = %s)"
        ),
    )
