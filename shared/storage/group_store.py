"""The store of one cluster consumer group: runs shared.queries.topics, one method per delivery transition.

claim_due (pending -> dispatched, and new messages straight to dispatched), started (-> running,
committed, leased), JobBatch.ack / fail (-> done, pending after a stepped delay, or dead; fenced),
requeue_expired (lost entries, interrupted runs). Attempts that do not end as done are traced.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from duecast.shared.acks import Ack, Row
from duecast.shared.fanout.keys import Entry
from duecast.shared.policy import dead_after_interruption, dead_after_retries, stepped_delay_s
from duecast.shared.queries.source import fence, in_list
from duecast.shared.queries.topics import (
    DELIVERY_COLUMNS,
    DISPATCHED,
    MESSAGE_COLUMNS,
    RUNNING,
    render_topics,
)
from duecast.shared.settings import MySQLSettings, SourceSettings, TopicsSettings
from duecast.shared.storage.db import Database
from duecast.shared.storage.job_store import JobBatch, error_text, isolate_suspects, renew_leases, worker_name
from duecast.shared.storage.leases import Extended, LeaseKeeper
from duecast.shared.storage.source_store import (
    STATUS_COUNT_CAP,
    SourceStatus,
    _scalar,
    _us,
)
from duecast.shared.storage.topic_ids import group_id, topic_id
from duecast.shared.storage.topic_schema import check_topic_tables
from duecast.shared.storage.units import Cursor, lock_or_skip

log = logging.getLogger("duecast.topics")
SEQ = "`seq`"


class TopicStore:
    """One cluster group, as a Store: its deliveries are keyed by message id within the group."""

    id_column = "seq"
    rows_per_entry = 1

    def __init__(
        self, db: Database, src: SourceSettings, topics: TopicsSettings, mysql: MySQLSettings
    ) -> None:
        self.db = db
        self.src = src
        self.topics = topics
        self.group = next(g for g in topics.groups if g.source == src.name)
        self.sql = render_topics(topics)
        self.topic_id = self.group_id = 0  # read in verify()
        self._lease_us = _us(topics.lease_s)
        self.worker = worker_name()
        self._leases = LeaseKeeper(self.extend_leases, topics.lease_s, mysql, f"messages of {src.name}")

    def verify(self) -> None:
        """Check the tables, and make the topic's and group's rows if this is their first use."""
        with self.db.transaction() as cur:
            check_topic_tables(cur, self.topics)
            self.topic_id = topic_id(cur, self.sql, self.group.topic)
            self.group_id = group_id(cur, self.sql, self.topic_id, self.group)

    def fence(self, entries: Sequence[Entry] | Iterator[Entry]) -> str:
        return fence(entries, SEQ)

    def ids(self, seqs: Sequence[int]) -> str:
        return in_list(SEQ, seqs)

    def claim_due(self, limit: int) -> list[Entry]:
        """Due pending deliveries -> DISPATCHED, then new messages (past the group's position) as
        deliveries born DISPATCHED; one transaction, committed on return."""
        with self.db.transaction() as cur:
            cur.execute(self.sql.claim_due, (self.group_id, limit))
            found = [(int(s), int(a)) for s, a in cur.fetchall()]
            if found:
                cur.execute(
                    self.sql.mark_dispatched.format(ids=self.ids([s for s, _ in found])), (self.group_id,)
                )
            entries = [Entry(s, a + 1) for s, a in found]
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

    @contextmanager
    def started(self, entries: Sequence[Entry], columns: Sequence[str] = ()) -> Iterator[JobBatch]:
        """DISPATCHED -> RUNNING for the entries still current, committed before the block runs; the
        rows carry their message. Leases are kept alive while the block runs."""
        if not entries:
            raise ValueError("started() needs at least one entry")
        with self.db.transaction(check=True) as cur:
            fence = self.fence(entries)
            lock_or_skip(
                lambda: cur.execute(self.sql.lock_dispatched.format(fence=fence), (self.group_id,)),
                lambda: cur.execute(self.sql.lock_dispatched_skip.format(fence=fence), (self.group_id,)),
            )
            rows = [dict(zip(DELIVERY_COLUMNS, r, strict=True)) for r in cur.fetchall()]
            rows, released = isolate_suspects(rows)
            if released:
                cur.execute(
                    self.sql.release.format(ids=self.ids([int(r["seq"]) for r in released])), (self.group_id,)
                )
            since = time.monotonic()  # before the leases' NOW(6): the keeper counts from here
            if rows:
                ids = self.ids([int(r["seq"]) for r in rows])
                cur.execute(
                    self.sql.mark_running.format(ids=ids), (self._lease_us, self.worker, self.group_id)
                )
                rows = self._with_messages(cur, rows)
        batch = JobBatch(self, rows, len(entries) - len(rows), key="seq")
        if not rows:
            yield batch
            return
        with self._leases.holding(batch.entries, since) as batch.hold:
            yield batch

    def _with_messages(self, cur: Cursor, rows: list[Row]) -> list[Row]:
        """Each started row with its message's columns; a delivery whose message is gone is dead."""
        cur.execute(
            self.sql.read_messages.format(ids=self.ids([int(r["seq"]) for r in rows])), (self.topic_id,)
        )
        messages = {int(m[0]): dict(zip(MESSAGE_COLUMNS, m, strict=True)) for m in cur.fetchall()}
        gone = [r for r in rows if int(r["seq"]) not in messages]
        for row in gone:
            self.finish_dead(cur, row, "dead: the message was deleted before this group handled it", 0)
        return [{**r, **messages[int(r["seq"])]} for r in rows if int(r["seq"]) in messages]

    def extend_leases(self, db: Database, entries: Sequence[Entry]) -> Extended:
        """Push the lease of running deliveries forward (on the lease keeper's own connection)."""
        with db.transaction() as cur:
            return renew_leases(
                cur, self.sql, entries, self.fence, extend_args=(self._lease_us,), where_args=(self.group_id,)
            )

    def group_key(self, ack: Ack) -> Any:
        if ack.action in ("default", "delete"):
            return ("done",)
        if ack.action in ("retry", "discard", "transaction"):
            return (ack.action, id(ack))
        raise ValueError(f"a consumer may not return Ack.{ack.action}(); use retry or discard")

    # -- sweeping ------------------------------------------------------------------------------

    def requeue_expired(self, visibility_timeout_s: float, limit: int) -> int:
        """Lost entries (dispatched, never started) -> pending; interrupted runs -> pending or dead."""
        return self.requeue_lost(visibility_timeout_s, limit) + self.interrupt_expired(limit)

    def requeue_unstarted(self, limit: int) -> int:
        """Every dispatched delivery no worker started -> pending now: Redis lost its entries."""
        return self.requeue_lost(0.0, limit)

    def requeue_lost(self, after_s: float, limit: int) -> int:
        with self.db.transaction() as cur:
            cur.execute(self.sql.find_expired_dispatched, (self.group_id, _us(after_s), limit))
            seqs = [int(r[0]) for r in cur.fetchall()]
            if not seqs:
                return 0
            ids = self.ids(seqs)
            cur.execute(self.sql.record_attempt.format(where=ids), ("lost", None, self.group_id, DISPATCHED))
            return int(cur.execute(self.sql.requeue_dispatched.format(ids=ids), (self.group_id,)))

    def interrupt_expired(self, limit: int) -> int:
        """RUNNING deliveries whose lease ran out: their worker died. Each is an interruption."""
        with self.db.transaction() as cur:
            cur.execute(self.sql.find_expired_running, (self.group_id, limit))
            found = [(int(s), int(n)) for s, n in cur.fetchall()]
            if not found:
                return 0
            cap = self.topics.max_interruptions
            ids = self.ids([s for s, _ in found])
            why = "interrupted: its worker stopped (killed, crashed or stalled) before finishing it"
            cur.execute(
                self.sql.record_attempt.format(where=ids), ("interrupted", why, self.group_id, RUNNING)
            )
            dead = [s for s, n in found if dead_after_interruption(n, cap)]
            again = [s for s, n in found if not dead_after_interruption(n, cap)]
            if again:
                cur.execute(self.sql.interrupted_retry.format(ids=self.ids(again)), (why, self.group_id))
            if dead:
                text = f"dead: interrupted {cap} times; its worker keeps dying (killed, out of memory...)"
                cur.execute(self.sql.interrupted_dead.format(ids=self.ids(dead)), (text, self.group_id))
                log.error("%d message(s) of %s dead after %d interruptions", len(dead), self.src.name, cap)
        return len(found)

    def release(self, entries: Sequence[Entry]) -> int:
        """Claimed but never pushed (Redis refused) -> pending now, fenced on the new attempt."""
        with self.db.transaction() as cur:
            stmt = self.sql.release_unpushed.format(fence=self.fence(entries))
            return int(cur.execute(stmt, (self.group_id,)))

    def reset_dispatched(self) -> int:
        with self.db.transaction() as cur:
            return int(cur.execute(self.sql.release_all, (self.group_id,)))

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
            age = None
            if first <= last:
                cur.execute(self.sql.message_age, (self.topic_id, first))
                value = _scalar(cur)
                age = None if value is None else float(value) / 1e6
        return SourceStatus(min(due + last - position, STATUS_COUNT_CAP), in_flight, age, unit="messages")

    # -- finishing, used by JobBatch ------------------------------------------------------------

    def finish_ok(self, cur: Cursor, rows: Sequence[Row]) -> int:
        return int(
            cur.execute(self.sql.finish_done.format(fence=self.fence(_entries(rows))), (self.group_id,))
        )

    def finish_failed(self, cur: Cursor, row: Row, outcome: object) -> int:
        text = error_text(outcome)
        errors = int(row["errors"])
        if dead_after_retries(errors, self.group.max_retries):
            log.error("message %s dead in %s after %d retries", row["seq"], self.src.name, errors)
            return self.finish_dead(cur, row, text, 1, outcome="failed")
        self._record(cur, row, "failed", text)
        delay = stepped_delay_s(errors + 1, self.topics.retry_delays_s)
        stmt = self.sql.fail_retry.format(fence=self.fence(_entries([row])))
        return int(cur.execute(stmt, (_us(delay), text, self.group_id)))

    def finish_dead(self, cur: Cursor, row: Row, text: str, errors: int, outcome: str = "dead") -> int:
        self._record(cur, row, outcome, text)
        stmt = self.sql.fail_dead.format(fence=self.fence(_entries([row])))
        return int(cur.execute(stmt, (errors, text, self.group_id)))

    def finish_special(self, cur: Cursor, row: Row, ack: Ack) -> int:
        """A consumer's explicit retry (not a failure) or discard (dead now)."""
        if ack.action == "discard":
            text = f"discarded by its consumer: {ack.reason}" if ack.reason else "discarded by its consumer"
            return self.finish_dead(cur, row, text, 0, outcome="discarded")
        self._record(cur, row, "retry", None)
        fence = self.fence(_entries([row]))
        if ack.at is not None:
            return int(cur.execute(self.sql.snooze_at.format(fence=fence), (ack.at, self.group_id)))
        return int(cur.execute(self.sql.snooze_delay.format(fence=fence), (_us(ack.delay_s), self.group_id)))

    def _record(self, cur: Cursor, row: Row, outcome: str, error: str | None) -> None:
        where = self.fence(_entries([row]))
        cur.execute(self.sql.record_attempt.format(where=where), (outcome, error, self.group_id, RUNNING))


def _entries(rows: Sequence[Row]) -> Iterator[Entry]:
    return (Entry(int(r["seq"]), int(r["dc_attempt"])) for r in rows)
