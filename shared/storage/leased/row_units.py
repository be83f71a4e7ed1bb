"""The per-row unit shape of the leased lifecycle (store.py): each row is dispatched, started, leased
and finished under its own (id, attempt), every statement fenced on it. A cluster group's
deliveries are such rows (groups.py); the statements come from its Scope.
"""

from __future__ import annotations

import time
from abc import abstractmethod
from collections.abc import Iterable, Iterator, Sequence
from datetime import datetime
from typing import Any

from ...acks import Row
from ...entries import Entry
from ...identifiers import quote
from ...policy import start_groups
from ...queries.source import START_TIME, fence, in_list
from ...states import State
from ..source_store import _scalar, _us
from ..units import Cursor, claiming, lock_or_skip
from .batch import LeasedBatch
from .keeper import Extended, renew_leases
from .scope import Scope
from .store import INTERRUPTED, Interrupted, LeasedStore, Started

DISPATCHED, RUNNING = int(State.DISPATCHED), int(State.RUNNING)


class RowUnits(LeasedStore):
    """Leased work whose unit is one row of the scope's table."""

    scope: Scope

    @property
    def _key(self) -> str:
        return quote(self.scope.key)

    # -- claim and start -------------------------------------------------------------------------

    def claim_due(self, limit: int) -> list[Entry]:
        claimed: list[Entry] = []  # a COMMIT cut off names them (CommitUnknown)
        with claiming(claimed), self.db.transaction() as cur:
            claimed += self._claim(cur, limit)
        return claimed

    def _claim(self, cur: Cursor, limit: int) -> list[Entry]:
        s = self.scope
        cur.execute(s.sql.claim_due, (*s.claim, limit))
        found = [(int(i), int(a)) for i, a in cur.fetchall()]
        if found:
            self._run(cur, s.sql.mark_dispatched.format(ids=self._ids(i for i, _ in found)), *s.where)
        self.returning = len(found)  # due pending ones were handed out before: retries, requeues
        return [Entry(i, a + 1) for i, a in found]

    def _start_units(self, entries: Sequence[Entry], began: Started) -> None:
        sql, where, key = self.scope.sql, self.scope.where, self.scope.key
        with self.db.transaction(check=True) as cur:
            locked = self._lock(cur, self._fence(entries))
            groups = start_groups([int(r["interruptions"]) for r in locked], self.max_interruptions)
            rows = [locked[i] for i in groups[0]] if groups else []
            first = len(rows)
            began.later = [list(self._entries([locked[i] for i in g])) for g in groups[1:]]
            began.since = time.monotonic()  # before the leases' NOW(6): the keeper counts from here
            began.units = list(self._entries(rows))
            if rows:
                cur.execute(START_TIME)
                began.at = _scalar(cur)  # this start's own time: what marks the rows as its own
                ids = self._ids(int(r[key]) for r in rows)
                mark = sql.mark_running.format(ids=ids)
                self._run(cur, mark, began.at, began.at, self._lease_us, self.worker, *where)
                rows = self._load(cur, rows)
            began.rows = rows
            began.skipped = len(entries) - len(locked) + first - len(rows)

    def _started_by(self, cur: Cursor, began: Started) -> set[int]:
        stmt = self.scope.sql.started_by.format(fence=self._fence(began.units))
        self._run(cur, stmt, *self.scope.where, began.at, self.worker)
        return {int(r[0]) for r in cur.fetchall()}

    def _drop_empty(self, units: list[Entry]) -> None:
        """Nothing to drop: a row started is its own work (a group's whose message is gone is dead)."""

    def _batch(self, began: Started, rows: list[Row]) -> LeasedBatch:
        return LeasedBatch(self, rows, began.skipped + len(began.rows) - len(rows), began.later)

    def _give_back(self, cur: Cursor, began: Started) -> None:
        where = self._fence(self._entries(began.rows))
        self._trace(cur, where, "retry", None, RUNNING)
        self._run(cur, self.scope.sql.snooze_delay.format(fence=where), 0, *self.scope.where)

    def _lock(self, cur: Cursor, where: str) -> list[Row]:
        """Lock the rows still DISPATCHED under their entry's attempt (`where`, a fence); rows another
        live session holds past the lock wait are skipped."""
        sql, args = self.scope.sql, self.scope.where
        lock_or_skip(
            lambda: self._run(cur, sql.lock_dispatched.format(fence=where), *args),
            lambda: self._run(cur, sql.lock_dispatched_skip.format(fence=where), *args),
        )
        names = [d[0] for d in cur.description or ()]
        return [dict(zip(names, values, strict=True)) for values in cur.fetchall()]

    def _load(self, cur: Cursor, rows: list[Row]) -> list[Row]:
        """The started rows as their handler gets them (a group adds each one's message)."""
        return rows

    def _renew(self, cur: Cursor, entries: Sequence[Entry]) -> Extended:
        sql = self.scope.sql
        return renew_leases(
            cur,
            entries,
            self._fence,
            lock=sql.lock_leased,
            extend=sql.extend_lease,
            read=sql.leased,
            extend_args=(self._lease_us,),
            where=self.scope.where,
        )

    # -- requeue -----------------------------------------------------------------------------------

    def _requeue_dispatched(self, after_s: float, limit: int) -> int:
        sql, where = self.scope.sql, self.scope.where
        with self.db.transaction() as cur:
            cur.execute(sql.find_expired_dispatched, (*self.scope.claim, _us(after_s), limit))
            found = [int(r[0]) for r in cur.fetchall()]
            if not found:
                return 0
            ids = self._ids(found)
            self._trace(cur, ids, "lost", None, DISPATCHED)
            return self._run(cur, sql.requeue_dispatched.format(ids=ids), *where)

    def release_unpushed(self, entries: Sequence[Entry]) -> int:
        with self.db.transaction() as cur:
            stmt = self.scope.sql.release_unpushed.format(fence=self._fence(entries))
            return self._run(cur, stmt, *self.scope.where)

    def reset_dispatched(self) -> int:
        with self.db.transaction() as cur:
            return self._run(cur, self.scope.sql.release_all, *self.scope.claim)

    def _interrupt_expired(self, cur: Cursor, limit: int) -> tuple[int, int]:
        s = self.scope
        cur.execute(s.sql.find_expired_running, (*s.claim, limit))
        found = [_interrupted(r) for r in cur.fetchall()]
        return (len(found), len(self._interrupt(cur, found, INTERRUPTED))) if found else (0, 0)

    def _interrupt_worker(
        self, cur: Cursor, worker: str, why: str, limit: int, fenced: bool
    ) -> tuple[int, int, bool]:
        s = self.scope
        cur.execute(s.sql.find_worker_running, (*s.claim, worker, limit))
        ids = [int(r[0]) for r in cur.fetchall()]
        if not ids:
            return 0, 0, False
        cur.execute(s.sql.lock_worker_running.format(ids=self._ids(ids)), (*s.where, worker))
        found = [_interrupted(r) for r in cur.fetchall()]
        dead = self._interrupt(cur, found, why, fenced) if found else []
        return len(found), len(dead), len(ids) >= limit

    def _interrupt(self, cur: Cursor, found: list[Interrupted], why: str, fenced: bool = False) -> list[int]:
        """Interrupted rows (locked, RUNNING): each attempt traced, then blamed."""
        self._trace(cur, self._ids(i for i, *_ in found), "interrupted", why, RUNNING)
        return self._blame(cur, found, why, fenced)

    def _interrupted(
        self,
        cur: Cursor,
        found: Sequence[Interrupted],
        ids: list[int],
        why: str,
        *,
        dead: bool,
        counted: bool = True,
    ) -> None:
        sql = self.scope.sql
        stmt = sql.interrupted_dead if dead else sql.interrupted_retry if counted else sql.interrupted_excused
        self._run(cur, stmt.format(ids=self._ids(ids)), why, *self.scope.where)

    # -- finishing: every statement fenced on (id, attempt) and RUNNING ------------------------------

    def finish_ok(self, cur: Cursor, rows: Sequence[Row]) -> int:
        where = self._fence(self._entries(rows))
        return self._run(cur, self.scope.done.format(fence=where), *self.scope.where)

    def finish_dead(self, cur: Cursor, row: Row, text: str, errors: int, outcome: str = "dead") -> int:
        where = self._fence(self._entries([row]))
        self._trace(cur, where, outcome, text, RUNNING)
        return self._run(cur, self.scope.sql.fail_dead.format(fence=where), errors, text, *self.scope.where)

    def _fail_retry(self, cur: Cursor, row: Row, delay_us: int, text: str) -> int:
        where = self._fence(self._entries([row]))
        self._trace(cur, where, "failed", text, RUNNING)
        return self._run(
            cur, self.scope.sql.fail_retry.format(fence=where), delay_us, text, *self.scope.where
        )

    def _snooze(self, cur: Cursor, row: Row, at: datetime | None, delay_us: int) -> int:
        s = self.scope
        where = self._fence(self._entries([row]))
        self._trace(cur, where, "retry", None, RUNNING)
        if at is not None:
            return self._run(cur, s.sql.snooze_at.format(fence=where), at, *s.where)
        return self._run(cur, s.sql.snooze_delay.format(fence=where), delay_us, *s.where)

    @abstractmethod
    def _trace(self, cur: Cursor, where: str, outcome: str, error: str | None, state: int) -> None:
        """Keep the attempt of the rows `where` (still in `state`) that is ending other than done."""

    # -- rendering -----------------------------------------------------------------------------------

    def _run(self, cur: Cursor, stmt: str, *args: Any) -> int:
        # No arguments: None, so that the driver leaves the text alone (no %-formatting).
        return int(cur.execute(stmt, args or None))

    def _ids(self, ids: Iterable[int]) -> str:
        return in_list(self._key, ids)

    def _fence(self, entries: Iterable[Entry]) -> str:
        return fence(entries, self._key)

    def _entries(self, rows: Sequence[Row]) -> Iterator[Entry]:
        return (Entry(int(r[self.scope.key]), int(r["dc_attempt"])) for r in rows)


def _interrupted(r: Sequence[Any]) -> Interrupted:
    """A (seq or id, interruptions, worker, started_at) row read for an interruption: its start is
    (worker, started_at), and its worker the one that started it."""
    return int(r[0]), int(r[1]), tuple(r[2:]), str(r[2])
