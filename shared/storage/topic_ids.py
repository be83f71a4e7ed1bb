"""Topic and group rows: made on first use (INSERT IGNORE, harmless from any number of processes), the
start position of a new group or broadcast member, every group's ids, and how far a group has finished.
Runs shared.queries.topics on a caller's cursor.
"""

from __future__ import annotations

from datetime import UTC, datetime

from ..queries.topics import TopicSQL
from ..settings import GroupSettings, TopicsSettings
from .units import Cursor


def topic_id(cur: Cursor, sql: TopicSQL, name: str) -> int:
    """The id of topic `name`, creating its row if this is its first use."""
    cur.execute(sql.topic_row, (name,))
    row = cur.fetchone()
    if row is None:
        cur.execute(sql.ensure_topic, (name,))
        cur.execute(sql.topic_row, (name,))
        row = cur.fetchone()
    assert row is not None
    return int(row[0])


def group_id(cur: Cursor, sql: TopicSQL, tid: int, group: GroupSettings) -> int:
    """The id of `group`; a new group starts at its `start` position, fixed by whoever comes first."""
    cur.execute(sql.group_row, (tid, group.name))
    row = cur.fetchone()
    if row is None:
        cur.execute(
            sql.ensure_group, (tid, group.name, group.mode, start_position(cur, sql, tid, group.start))
        )
        cur.execute(sql.group_row, (tid, group.name))
        row = cur.fetchone()
    assert row is not None
    return int(row[0])


def start_position(cur: Cursor, sql: TopicSQL, tid: int, start: str) -> int:
    """The position (the id before the first message to read) that `start` names, by the database's
    clock and ids: "latest" = the newest id now; "earliest" = before the oldest message kept;
    a message id n = n - 1; an ISO time = before the first message published at or after it."""
    latest = _scalar(cur, sql.pos_latest, (tid,))
    if start == "latest":
        return latest
    if start == "earliest":
        first = _maybe(cur, sql.pos_earliest, (tid,))
        return latest if first is None else first
    if start.isdigit():
        return max(0, int(start) - 1)
    at = datetime.fromisoformat(start).astimezone(UTC).replace(tzinfo=None)
    found = _maybe(cur, sql.pos_time, (tid, at))
    return latest if found is None else found


def _maybe(cur: Cursor, stmt: str, args: tuple[object, ...]) -> int | None:
    cur.execute(stmt, args)
    row = cur.fetchone()
    return None if row is None or row[0] is None else int(row[0])


def _scalar(cur: Cursor, stmt: str, args: tuple[object, ...]) -> int:
    value = _maybe(cur, stmt, args)
    return 0 if value is None else value


def all_ids(cur: Cursor, sql: TopicSQL) -> dict[tuple[str, str], tuple[int, int]]:
    """(topic, group) -> (topic id, group id), for every group row."""
    cur.execute(sql.topics_all)
    names = {int(i): str(n) for i, n, _ in cur.fetchall()}
    cur.execute(sql.groups_all)
    return {(names[int(t)], str(n)): (int(t), int(i)) for i, t, n, *_ in cur.fetchall() if int(t) in names}


def finished_through(
    cur: Cursor, sql: TopicSQL, topics: TopicsSettings, group: GroupSettings, gid: int
) -> int | None:
    """The id up to which `group` has finished every message (None: it holds nothing back).
    Cheaper than a whole status: the pruner asks this of every group on every run."""
    if group.mode == "broadcast":
        cur.execute(sql.members_of, (round(topics.member_ttl_s * 1_000_000), gid))
        live = [int(p) for _, p, _, is_live, *_ in cur.fetchall() if is_live]
        return min(live) if live else None
    cur.execute(sql.group_head, (gid,))
    position = int((cur.fetchone() or (0,))[0])
    cur.execute(sql.oldest_unfinished, (gid,))
    row = cur.fetchone()
    oldest = None if row is None else row[0]
    return position if oldest is None else min(int(oldest) - 1, position)
