"""The store of one broadcast group member: its own position in a topic, and nothing per message.

join (take the member's row: it is ours while we heartbeat), read (the messages after its position),
advance (the new position, fenced on owner and the position read), beat, leave. No acks: a member
that dies re-reads from its last committed position. Runs shared.queries.topics.TopicSQL; the loop
that drives it is worker/broadcast.py.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Sequence

from ..acks import Ack, Row
from ..errors import DuecastError
from ..queries.topics import MESSAGE_COLUMNS, render_topics
from ..settings import GroupSettings, TopicsSettings
from .db import Database
from .source_store import _us
from .topic_ids import group_id, start_position, topic_id
from .topic_schema import check_topic_tables
from .units import Cursor, is_transient, savepoint

log = logging.getLogger("duecast.topics")


class LostMember(DuecastError, RuntimeError):
    """Our member row moved on without us (a reset, or another process took it): read it again."""


def member_name(topics: TopicsSettings) -> str:
    """topics.member, or this host's name: stable across restarts, so a member resumes its position."""
    return topics.member or socket.gethostname()[:100]


class MemberStore:
    def __init__(self, db: Database, topics: TopicsSettings, group: GroupSettings, member: str) -> None:
        self.db = db
        self.topics = topics
        self.group = group
        self.member = member
        self.owner = f"{socket.gethostname()[:100]}:{os.getpid()}"
        self.sql = render_topics(topics)
        self.topic_id = self.group_id = 0
        self.position = 0  # the last message id this member has read, as last committed

    def verify(self) -> None:
        with self.db.transaction() as cur:
            check_topic_tables(cur, self.topics)
            self.topic_id = topic_id(cur, self.sql, self.group.topic)
            self.group_id = group_id(cur, self.sql, self.topic_id, self.group)

    def join(self) -> bool:
        """Take this member's row (a new member starts at the group's `start`). False while another
        live process holds it (it heartbeats within topics.member_ttl_s)."""
        with self.db.transaction() as cur:
            start = start_position(cur, self.sql, self.topic_id, self.group.start)
            cur.execute(self.sql.member_join, (self.group_id, self.member, start))
            ttl = _us(self.topics.member_ttl_s)
            taken = cur.execute(
                self.sql.member_take, (self.owner, self.group_id, self.member, self.owner, ttl)
            )
            if not taken:
                return False
            self._read_position(cur)
        return True

    def read(self, limit: int) -> list[Row]:
        """Messages after the stored position (re-read each time: a reset moves it under us)."""
        with self.db.transaction() as cur:
            self._read_position(cur)
            cur.execute(self.sql.read_from, (self.topic_id, self.position, limit))
            return [dict(zip(MESSAGE_COLUMNS, r, strict=True)) for r in cur.fetchall()]

    def advance(self, rows: Sequence[Row], outcomes: Sequence[Ack | BaseException]) -> int:
        """Move past `rows` (read from the current position); returns how many failed. Transactional
        consumers' work runs here, each under a savepoint, and commits with the position."""
        last = int(rows[-1]["seq"])
        skipped = last - self.position - len(rows)
        if skipped:
            log.warning(
                "member %s of %s skipped %d message(s) deleted before it read them (it was away longer "
                "than retention)",
                self.member,
                self.group.source,
                skipped,
            )
        with self.db.transaction() as cur:
            failed = sum(1 for o in outcomes if not _applied(cur, o))
            args = (last, len(rows) - failed, failed, skipped)
            fence = (self.group_id, self.member, self.owner, self.position)
            if not cur.execute(self.sql.member_advance, (*args, *fence)):
                raise LostMember(f"member {self.member} of {self.group.source} moved without us")
        self.position = last
        return failed

    def beat(self) -> bool:
        with self.db.transaction() as cur:
            return bool(cur.execute(self.sql.member_beat, (self.group_id, self.member, self.owner)))

    def leave(self) -> None:
        """Let a restarted process take this member at once instead of after member_ttl_s."""
        with self.db.transaction() as cur:
            cur.execute(self.sql.member_leave, (self.group_id, self.member, self.owner))

    def _read_position(self, cur: Cursor) -> None:
        cur.execute(self.sql.member_row, (self.group_id, self.member))
        row = cur.fetchone()
        if row is None or row[1] != self.owner:
            raise LostMember(f"member {self.member} of {self.group.source} is held by {row and row[1]}")
        self.position = int(row[0])


def _applied(cur: Cursor, outcome: Ack | BaseException) -> bool:
    """Whether a message was handled: a plain success, or a transactional consumer's work that ran
    without raising (its writes kept). Retries and discards mean nothing without acks."""
    if not isinstance(outcome, Ack):
        return False
    if outcome.action != "transaction" or outcome.work is None:
        return True
    try:
        with savepoint(cur, "dc_member"):
            outcome.work(cur)
    except Exception as exc:
        if is_transient(exc):
            raise  # the whole transaction is gone: the member reads again
        log.exception("transactional consumer failed; its writes were rolled back")
        return False
    return True
