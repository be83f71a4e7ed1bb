"""Operator actions on topics (`duecast topics`) and retention: find a message by id or key, trace it
through every group, replay or skip a group from a position, and prune what every group finished.

Runs shared.queries.topics statements; pages bulk work in short transactions.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from itertools import takewhile
from typing import Any

from pydantic import TypeAdapter

from ..errors import DuecastError
from ..queries.topics import ATTEMPT_COLUMNS, MESSAGE_COLUMNS, TRACE_COLUMNS, render_topics
from ..settings import GroupSettings, StartAt, TopicsSettings
from .db import Database
from .source_store import _scalar, _us
from .topic_ids import all_ids, finished_through, group_id, start_position, topic_id

log = logging.getLogger("duecast.topics")
REPLAY_PAGE = 5000  # message ids per replay transaction
_START = TypeAdapter(StartAt)


class TopicError(DuecastError, ValueError):
    """An operator asked for a topic, group or position that does not exist; nothing changed."""


def position(to: str) -> str:
    """`to` as a position to move a group to, or TopicError in one line (not pydantic's dump)."""
    try:
        return str(_START.validate_python(to))
    except ValueError:
        raise TopicError(
            f'{to!r} is not a position: give "earliest", "latest", a message id, or an ISO time '
            "with its zone (2026-11-24T09:00:00+00:00)"
        ) from None


@dataclass(frozen=True)
class Reset:
    group: str
    old_position: int
    new_position: int
    replayed: int  # messages made pending again (cluster), or members moved back (broadcast)


class TopicAdmin:
    def __init__(self, db: Database, topics: TopicsSettings) -> None:
        self.db = db
        self.topics = topics
        self.sql = render_topics(topics)

    def ensure_groups(self) -> None:
        """Make the rows of every declared topic and group now (dispatcher start), so status shows
        them and each cluster group's start position is fixed when it is declared."""
        with self.db.transaction() as cur:
            tids = {name: topic_id(cur, self.sql, name) for name in self.topics.names}
            for group in self.topics.groups:
                group_id(cur, self.sql, tids[group.topic], group)

    def _ids(self, topic: str, group: str | None = None) -> tuple[int, int]:
        with self.db.transaction() as cur:
            ids = all_ids(cur, self.sql)
            cur.execute(self.sql.topics_all)
            topic_ids = {str(n): int(i) for i, n, _ in cur.fetchall()}
        if topic not in topic_ids:
            raise TopicError(
                f"no topic {topic!r} has been used yet (declared: {', '.join(self.topics.names)})"
            )
        if group is None:
            return topic_ids[topic], 0
        if (topic, group) not in ids:
            raise TopicError(f"no group {group!r} of topic {topic!r} has been used yet")
        return ids[(topic, group)]

    def message(self, topic: str, message_id: int) -> dict[str, Any] | None:
        tid, _ = self._ids(topic)
        with self.db.transaction() as cur:
            cur.execute(self.sql.show_message, (tid, message_id))
            row = cur.fetchone()
        return None if row is None else dict(zip(MESSAGE_COLUMNS, row, strict=True))

    def find(self, topic: str, key: str, limit: int = 20) -> list[dict[str, Any]]:
        """Messages published with `key`, newest first."""
        tid, _ = self._ids(topic)
        with self.db.transaction() as cur:
            cur.execute(self.sql.find_by_key, (tid, key, limit))
            return [dict(zip(MESSAGE_COLUMNS, r, strict=True)) for r in cur.fetchall()]

    def trace(self, topic: str, message_id: int) -> dict[str, dict[str, Any]]:
        """Per group: its delivery (state, attempt, when dispatched, by which worker started...) and
        every earlier attempt's outcome and error; for broadcast groups, which members read it."""
        out: dict[str, dict[str, Any]] = {}
        with self.db.transaction() as cur:
            ids = all_ids(cur, self.sql)
            for (t, name), (_, gid) in sorted(ids.items()):
                if t != topic:
                    continue
                cur.execute(self.sql.trace, (gid, message_id))
                row = cur.fetchone()
                cur.execute(self.sql.attempts_of, (gid, message_id))
                attempts = [dict(zip(ATTEMPT_COLUMNS, a, strict=True)) for a in cur.fetchall()]
                cur.execute(self.sql.members_of, (_us(self.topics.member_ttl_s), gid))
                read_by = sorted(str(m[0]) for m in cur.fetchall() if int(m[1]) >= message_id)
                delivery = None if row is None else dict(zip(TRACE_COLUMNS, row, strict=True))
                out[name] = {"delivery": delivery, "attempts": attempts, "read_by": read_by}
        return out

    def reset(self, group: GroupSettings, to: str, member: str | None = None) -> Reset:
        """Move a group's position to `to` ("earliest", "latest", a message id, an ISO time).

        Back (replay): cluster groups get every message after it delivered again, to this group only
        (done and dead deliveries made pending, with the done outcome kept in the trace; pending and
        in-flight ones left as they are); broadcast members (all, or `member`) re-read from it.
        Forward (skip): messages not yet handed to the group are skipped.
        """
        spec = position(to)
        tid, gid = self._ids(group.topic, group.name)
        with self.db.transaction() as cur:
            cur.execute(self.sql.lock_group_wait, (gid,))
            old = int(_scalar(cur) or 0)
            new = start_position(cur, self.sql, tid, spec)
            if group.mode == "broadcast":
                moved = int(cur.execute(self.sql.member_reset, (new, gid, member, member)))
                return Reset(group.source, old, new, moved)
            if new >= old:
                cur.execute(self.sql.set_position, (new, gid))
                return Reset(group.source, old, new, 0)
        replayed = 0
        for lo in range(new, old, REPLAY_PAGE):  # ascending: the pruner never passes a revived id
            hi = min(lo + REPLAY_PAGE, old)
            with self.db.transaction() as cur:
                cur.execute(self.sql.lock_group_wait, (gid,))
                cur.execute(self.sql.count_range, (tid, lo, hi))
                replayed += int(_scalar(cur) or 0)
                cur.execute(self.sql.archive_done, (gid, lo, hi))
                cur.execute(self.sql.requeue_range, (gid, tid, lo, hi))
        with self.db.transaction() as cur:
            cur.execute(self.sql.set_position, (old, gid))  # position stays; reset_at records when
        log.info("replayed %d message(s) of %s after id %d", replayed, group.source, new)
        return Reset(group.source, old, new, replayed)

    def prune(self, limit: int) -> int:
        """Delete, per topic, up to `limit` of the oldest messages (with their deliveries and trace)
        that every declared group has finished and that are older than retention_s. A group that
        has not finished a message keeps it, however old: it is reported, never skipped."""
        pruned = 0
        with self.db.transaction() as cur:
            cur.execute(self.sql.topics_all)
            topics = [(int(t), str(n), int(last)) for t, n, last in cur.fetchall()]
        for tid, name, last in topics:
            with self.db.transaction() as cur:
                cur.execute(self.sql.lock_groups_shared, (tid,))
                group_ids = [int(r[0]) for r in cur.fetchall()]
                ids = all_ids(cur, self.sql)
                safe = last
                for g in self.topics.groups:
                    if g.topic == name and (name, g.name) in ids:
                        through = finished_through(cur, self.sql, self.topics, g, ids[(name, g.name)][1])
                        safe = safe if through is None else min(safe, through)
                cur.execute(self.sql.prune_scan, (_us(self.topics.retention_s), tid, safe, limit))
                # The expired prefix, in id order (ids follow publishing time).
                old = [int(seq) for seq, _ in takewhile(lambda r: bool(r[1]), cur.fetchall())]
                if not old:
                    continue
                upto = old[-1]
                for gid in group_ids:
                    cur.execute(self.sql.prune_deliveries, (gid, upto))
                    cur.execute(self.sql.prune_attempts, (gid, upto))
                pruned += int(cur.execute(self.sql.prune_messages, (tid, upto)))
        return pruned
