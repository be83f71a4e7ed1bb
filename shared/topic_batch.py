"""The messages one worker batch of a cluster group started (RUNNING, committed): `ack` and `fail`
each commit, fenced on (message id, attempt) and RUNNING through the group's TopicStore.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import pymysql.cursors

from shared.handlers import Ack, Row
from shared.keys import Entry
from shared.store import AckCounts

if TYPE_CHECKING:
    from shared.topic_store import TopicStore


class TopicBatch:
    def __init__(self, store: TopicStore, rows: list[Row], skipped: int) -> None:
        self._store = store
        self.rows = rows
        self.skipped = skipped
        self.entries = [Entry(int(r["seq"]), int(r["dc_attempt"])) for r in rows]

    def phases(self) -> list[list[Row]]:
        """The clean rows, then the suspect (interrupted before, if any) alone, after their ack."""
        clean = [r for r in self.rows if int(r["interruptions"]) == 0]
        suspect = [r for r in self.rows if int(r["interruptions"]) > 0]
        return [p for p in (clean, suspect) if p]

    def ack(self, acks: Sequence[tuple[Row, Ack]]) -> AckCounts:
        """Finish handled messages in one transaction: successes as one fenced statement, explicit
        retries and discards one by one, transactional consumers each under a savepoint."""
        if not acks:
            return AckCounts(0, 0)
        store = self._store
        acked = stale = 0
        failures: list[tuple[Row, object]] = []
        with store.db.transaction() as cur:
            done = [row for row, ack in acks if ack.action in ("default", "delete")]
            if done:
                n = store.finish_ok(cur, done)
                acked += n
                stale += len(done) - n
            for row, ack in acks:
                if ack.action in ("retry", "discard"):
                    n = store.finish_special(cur, row, ack)
                    acked += n
                    stale += 1 - n
                elif ack.action == "transaction":
                    outcome = self._in_transaction(cur, row, ack)
                    if outcome is None:
                        acked += 1
                    elif outcome == "stale":
                        stale += 1
                    else:
                        failures.append((row, outcome))
        self.fail(failures)
        return AckCounts(acked, stale, len(failures))

    def _in_transaction(self, cur: pymysql.cursors.Cursor, row: Row, ack: Ack) -> object | None:
        """Run a transactional consumer and finish its message under one savepoint: its writes stay
        only if this attempt really finishes the message. Returns None (done), "stale", or the failure."""
        assert ack.work is not None
        cur.execute("SAVEPOINT dc_message")
        try:
            result = ack.work(cur)
            final = Ack.default() if result is None else result
            if not isinstance(final, Ack) or final.action in ("touch", "transaction"):
                raise TypeError(f"a consumer must return None, Ack.retry or Ack.discard, not {final!r}")
            if final.action in ("default", "delete"):
                n = self._store.finish_ok(cur, [row])
            else:
                n = self._store.finish_special(cur, row, final)
        except Exception as exc:
            cur.execute("ROLLBACK TO SAVEPOINT dc_message")
            return exc
        if n == 0:
            cur.execute("ROLLBACK TO SAVEPOINT dc_message")  # another run owns it now: undo its writes
            return "stale"
        return None

    def fail(self, failures: Sequence[tuple[Row, object]]) -> None:
        """Failed runs: traced, then pending again after the group's next stepped delay, or dead."""
        if not failures:
            return
        with self._store.db.transaction() as cur:
            for row, outcome in failures:
                self._store.finish_failed(cur, row, outcome)
