"""A cluster consumer group's store: the leased lifecycle (store.py) per row (row_units.py), the
topics tables' statements (shared/queries/topics.py) scoped to one group's deliveries.

What only groups do: new messages materialised as deliveries born dispatched, each started row read with
its message, stepped retry delays up to max_retries, and a trace of each
attempt that did not end as done.
"""

from __future__ import annotations

import logging
from dataclasses import replace

from ...acks import Row
from ...entries import Entry
from ...limits import MAX_DELAY_S
from ...policy import dead_after_retries, stepped_delay_s
from ...queries.topics import DISPATCHED, MESSAGE_COLUMNS, RUNNING, TopicSQL, render_topics
from ...settings import MySQLSettings, SourceSettings, TopicsSettings
from ..db import Database
from ..source_store import STATUS_COUNT_CAP, SourceStatus, _scalar
from ..topic_ids import group_id, topic_id
from ..topic_schema import check_topic_tables
from ..units import Cursor
from .row_units import RowUnits
from .scope import Scope

log = logging.getLogger("duecast.topics")


class GroupStore(RowUnits):
    """One cluster group: its deliveries are keyed by message id (`seq`) within the group."""

    def __init__(
        self,
        db: Database,
        src: SourceSettings,
        topics: TopicsSettings,
        mysql: MySQLSettings,
        max_delay_s: float = MAX_DELAY_S,
    ) -> None:
        self.topics = topics
        self.group = next(g for g in topics.groups if g.source == src.name)
        self.sql: TopicSQL = render_topics(topics)
        self.topic_id = self.group_id = 0  # read in verify()
        scope = Scope(
            sql=self.sql,
            key="seq",
            claim=(0,),  # no group yet: verify() sets its id
            where=(0,),
            done=self.sql.finish_done,
            noun="message",
            place=src.name,
            handler="a consumer",
            author="consumer",
            log=log,
        )
        super().__init__(
            db,
            src,
            scope,
            mysql,
            lease_s=topics.lease_s,
            max_interruptions=topics.max_interruptions,
            what=f"messages of {src.name}",
            max_delay_s=max_delay_s,
        )

    def verify(self) -> None:
        """Check the tables, make the topic's and group's rows if this is their first use, and scope
        every statement to the group."""
        with self.db.transaction() as cur:
            check_topic_tables(cur, self.topics)
            self.topic_id = topic_id(cur, self.sql, self.group.topic)
            self.group_id = group_id(cur, self.sql, self.topic_id, self.group)
        self.scope = replace(self.scope, claim=(self.group_id,), where=(self.group_id,))

    def _claim(self, cur: Cursor, limit: int) -> list[Entry]:
        """Due pending deliveries, then new messages (past the group's position) as deliveries born
        DISPATCHED; one transaction."""
        entries = super()._claim(cur, limit)
        if len(entries) < limit:
            entries += self._materialise(cur, limit - len(entries))
        return entries

    def _materialise(self, cur: Cursor, room: int) -> list[Entry]:
        cur.execute(self.sql.lock_group, (self.group_id,))
        row = cur.fetchone()
        if row is None:
            return []  # another dispatcher holds the group row this instant: its turn
        position = int(row[0])
        cur.execute(self.sql.pos_latest, (self.topic_id,))
        last = int(_scalar(cur) or 0)
        if last <= position:
            return []
        cur.execute(self.sql.first_after, (self.topic_id, position))
        first = _scalar(cur)
        if first is None or int(first) > last:
            return []
        lo, hi = int(first), min(int(first) + room - 1, last)
        made = int(cur.execute(self.sql.materialise, (self.group_id, self.topic_id, lo, hi)))
        seqs = list(range(lo, hi + 1))
        if made != len(seqs):  # only if a message was deleted by hand: hand out what is there
            log.warning("%s: %d of messages %d..%d are missing", self.src.name, len(seqs) - made, lo, hi)
            cur.execute(self.sql.made_between, (self.group_id, lo, hi))
            seqs = [int(r[0]) for r in cur.fetchall()]
        skipped = hi - position - len(seqs)
        if skipped:
            # Only messages deleted before the group read them (retention, a reset to before the
            # oldest kept) leave such a gap: say so, and count it on the group.
            log.warning("group %s skipped %d message(s) deleted before it read them", self.src.name, skipped)
        cur.execute(self.sql.advance_group, (hi, skipped, self.group_id))
        return [Entry(s, 1) for s in seqs]

    def _load(self, cur: Cursor, rows: list[Row]) -> list[Row]:
        """Each started row with its message's columns (a plain read); a delivery whose message is
        gone is dead."""
        cur.execute(
            self.sql.read_messages.format(ids=self._ids(int(r["seq"]) for r in rows)), (self.topic_id,)
        )
        messages = {int(m[0]): dict(zip(MESSAGE_COLUMNS, m, strict=True)) for m in cur.fetchall()}
        gone = [r for r in rows if int(r["seq"]) not in messages]
        for row in gone:
            self.finish_dead(cur, row, "dead: the message was deleted before this group handled it", 0)
        return [{**r, **messages[int(r["seq"])]} for r in rows if int(r["seq"]) in messages]

    def _retry_in(self, row: Row) -> float | None:
        """The group's stepped delays, until the message was already retried max_retries times."""
        errors = int(row["errors"])
        if dead_after_retries(errors, self.group.max_retries):
            log.error("message %s dead in %s after %d retries", row["seq"], self.src.name, errors)
            return None
        return stepped_delay_s(errors + 1, self.topics.retry_delays_s)

    def _trace(self, cur: Cursor, where: str, outcome: str, error: str | None, state: int) -> None:
        self._run(cur, self.sql.record_attempt.format(where=where), outcome, error, self.group_id, state)

    def status(self) -> SourceStatus:
        """Due = pending deliveries due now plus messages not yet materialised; the age is the
        group's lag: how long ago its oldest unfinished message was published."""
        with self.db.transaction() as cur:
            cur.execute(self.sql.count_due, (self.group_id, STATUS_COUNT_CAP))
            due = int(_scalar(cur) or 0)
            in_flight = 0
            for state in (DISPATCHED, RUNNING):
                cur.execute(self.sql.count_state, (state, self.group_id, STATUS_COUNT_CAP))
                in_flight += int(_scalar(cur) or 0)
            cur.execute(self.sql.group_head, (self.group_id,))
            position, last, _ = (int(v) for v in cur.fetchone() or (0, 0, 0))
            cur.execute(self.sql.oldest_unfinished, (self.group_id,))
            oldest = _scalar(cur)
            first = int(oldest) if oldest is not None else position + 1
            age = None if first > last else self._age(cur, first)
        return SourceStatus(min(due + last - position, STATUS_COUNT_CAP), in_flight, age, unit="messages")

    def _age(self, cur: Cursor, seq: int) -> float | None:
        cur.execute(self.sql.message_age, (self.topic_id, seq))
        value = _scalar(cur)
        return None if value is None else float(value) / 1e6
