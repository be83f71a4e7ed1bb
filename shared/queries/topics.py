"""Every SQL statement on the topics tables, each named, with the index it relies on (a cluster group's
deliveries in shared.queries.topic_deliveries, the names they share in shared.queries.topic_names).

Table names come from validated settings; values are parameters; `{ids}` / `{fence}` placeholders are
rendered from Python ints only (shared.queries.source). Times are NOW(6) on the server, shifted by
microseconds.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..identifiers import quote
from ..settings import TopicsSettings
from .topic_deliveries import claiming, finishing, starting, sweeping
from .topic_names import (
    ATTEMPT_COLUMNS,
    DEAD,
    DELIVERY_COLUMNS,
    DISPATCHED,
    DONE,
    IDLE,
    MESSAGE_COLUMNS,
    RUNNING,
    TRACE_COLUMNS,
    UNFINISHED,
    TopicNames,
    topic_names,
)

# Re-exported: the stores take the states and columns from here, with the statements.
__all__ = [
    "ATTEMPT_COLUMNS",
    "DEAD",
    "DELIVERY_COLUMNS",
    "DISPATCHED",
    "DONE",
    "IDLE",
    "MESSAGE_COLUMNS",
    "RUNNING",
    "TRACE_COLUMNS",
    "UNFINISHED",
    "TopicSQL",
    "render_topics",
]


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
    started_by: str
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
    interrupted_excused: str
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
    n = topic_names(topics)
    return TopicSQL(
        **_publishing(n),
        **_positions(n),
        **claiming(n),
        **starting(n),
        **finishing(n),
        **sweeping(n),
        **_status(n),
        **_members(n),
        **_retention(n),
        **_operating(n),
    )


def _publishing(n: TopicNames) -> dict[str, str]:
    """Publishing."""
    t, m = n.t, n.m
    return dict(
        ensure_topic=f"INSERT IGNORE INTO {t} (`name`) VALUES (%s)",
        topic_row=f"SELECT `id`, `last_seq` FROM {t} WHERE `name` = %s",
        # Reserve n ids. The row lock is held until the publisher commits, so a second publisher
        # of the topic waits: ids are gap-free and commit in order (positions are safe to keep).
        reserve=f"UPDATE {t} SET `last_seq` = `last_seq` + %s WHERE `id` = %s",
        reserved=f"SELECT `last_seq` FROM {t} WHERE `id` = %s",
        insert_message=f"INSERT INTO {m} (`topic_id`, `seq`, `msg_key`, `payload`, `created_at`) VALUES ",
        insert_values="(%s, %s, %s, %s, NOW(6))",
    )


def _positions(n: TopicNames) -> dict[str, str]:
    """Where a new group (or broadcast member) starts: the id before its first message."""
    t, m, g = n.t, n.m, n.g
    return dict(
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
    )


def _status(n: TopicNames) -> dict[str, str]:
    """Status: dc_due prefix counts, capped."""
    t, m, g, d = n.t, n.m, n.g, n.d
    return dict(
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
    )


def _members(n: TopicNames) -> dict[str, str]:
    """Broadcast members: each owns its row (owner = host:pid, kept alive by heartbeats)."""
    m, mb, msg_cols = n.m, n.mb, n.msg_cols
    return dict(
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
    )


def _retention(n: TopicNames) -> dict[str, str]:
    """Retention: the oldest messages of a topic, deleted a prefix of ids at a time."""
    m, g, d, a = n.m, n.g, n.d, n.a
    return dict(
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
    )


def _operating(n: TopicNames) -> dict[str, str]:
    """Operators."""
    t, m, g, d, a = n.t, n.m, n.g, n.d, n.a
    mb, revive, msg_cols = n.mb, n.revive, n.msg_cols
    return dict(
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
