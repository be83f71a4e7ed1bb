"""One store for leased work, a job queue's or a cluster group's: one method per state transition.

claim_due (pending -> dispatched), started (-> running, committed, its leases kept while handlers run),
LeasedBatch.ack / fail (fenced finishes), requeue_* by cause (expired, lost, interrupted, held), and
release_unpushed.
A kind differs only by its Scope and a few hooks, kept in jobs.py and groups.py.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from ...acks import Ack, Row
from ...entries import Entry
from ...identifiers import quote
from ...policy import blame_interruptions, start_groups
from ...queries.source import fence, in_list
from ...settings import MySQLSettings, SourceSettings
from ...states import State
from ...telemetry import observe
from ..db import Database
from ..source_store import SourceStatus, _us
from ..units import MYSQL_ERRORS, Cursor, lock_or_skip
from ..worker_registry import worker_name
from .batch import LeasedBatch, error_text, finish_group
from .keeper import Extended, LeaseKeeper, renew_leases
from .scope import Scope

DISPATCHED, RUNNING = int(State.DISPATCHED), int(State.RUNNING)
INTERRUPTED = "interrupted: its worker stopped (killed, crashed or stalled) before finishing it"
# A run whose lease ran out: (id, interruptions so far, its start: the worker and start time).
Interrupted = tuple[int, int, tuple[Any, ...]]


class LeasedStore(ABC):
    """Leased work of one scope, as a Store the dispatcher, sweeper and worker drive."""

    rows_per_entry = 1
    claim_weight = 1

    def __init__(
        self,
        db: Database,
        src: SourceSettings,
        scope: Scope,
        mysql: MySQLSettings,
        *,
        lease_s: float,
        max_interruptions: int,
        timeout_s: float | None = None,
    ) -> None:
        self.db = db
        self.src = src
        self.scope = scope
        self.max_interruptions = max_interruptions
        self.worker = worker_name()
        self._key = quote(scope.key)
        self._lease_us = _us(lease_s)
        what = f"{scope.noun}s of {src.name}"
        self._leases = LeaseKeeper(self.extend_leases, lease_s, mysql, what, timeout_s=timeout_s)

    @property
    def id_column(self) -> str:
        return self.scope.key

    @abstractmethod
    def verify(self) -> None: ...

    @abstractmethod
    def status(self) -> SourceStatus: ...

    # -- claim and start -------------------------------------------------------------------------

    def claim_due(self, limit: int) -> list[Entry]:
        """Due pending rows of the scope -> DISPATCHED under a new attempt; committed on return."""
        with self.db.transaction() as cur:
            return self._claim(cur, limit)

    def _claim(self, cur: Cursor, limit: int) -> list[Entry]:
        s = self.scope
        cur.execute(s.sql.claim_due, (*s.claim, limit))
        found = [(int(i), int(a)) for i, a in cur.fetchall()]
        if found:
            self._run(cur, s.sql.mark_dispatched.format(ids=self._ids(i for i, _ in found)), *s.where)
        return [Entry(i, a + 1) for i, a in found]

    @contextmanager
    def started(self, entries: Sequence[Entry], columns: Sequence[str] = ()) -> Iterator[LeasedBatch]:
        """`start`, then `close` when the block ends, however it ends."""
        batch = self.start(entries, columns)
        try:
            yield batch
        finally:
            batch.close()

    def start(self, entries: Sequence[Entry], columns: Sequence[str] = ()) -> LeasedBatch:
        """DISPATCHED -> RUNNING for the first group of the entries still current, committed on
        return; the other groups stay DISPATCHED, in `batch.later`, for the worker to start one by
        one once this one is finished (shared.policy.start_groups: clean rows together, suspects in
        groups that shrink with each death, so a poison job is found and healthy ones run).

        Until `batch.close()` a lease keeper extends their leases, so a long run is not taken for an
        interrupted one. Stale, deleted or elsewhere-held entries are left out (`skipped`).
        """
        if not entries:
            raise ValueError("start() needs at least one entry")
        sql, where, key = self.scope.sql, self.scope.where, self.scope.key
        with self.db.transaction(check=True) as cur:
            locked = self._lock(cur, self._fence(entries))
            groups = start_groups([int(r["interruptions"]) for r in locked], self.max_interruptions)
            rows = [locked[i] for i in groups[0]] if groups else []
            first = len(rows)
            later = [list(self._entries([locked[i] for i in g])) for g in groups[1:]]
            since = time.monotonic()  # before the leases' NOW(6): the keeper counts from here
            if rows:
                ids = self._ids(int(r[key]) for r in rows)
                self._run(cur, sql.mark_running.format(ids=ids), self._lease_us, self.worker, *where)
                rows = self._load(cur, rows)
        if rows and not self._leases.in_time(since):
            rows = self._give_back_late(rows, time.monotonic() - since)
        batch = LeasedBatch(self, rows, len(entries) - len(locked) + first - len(rows), later)
        if rows:
            batch.keep(self._leases.holding(batch.entries, since))
        return batch

    def _give_back_late(self, rows: list[Row], took_s: float) -> list[Row]:
        """A start whose commit stalled so long that the leases may run out (or have) before the
        keeper confirms one: run nothing (another worker may take the work the moment a lease ends),
        and make the rows due again now, fenced on (id, attempt) and RUNNING, as Ack.retry() does
        (no attempt used up). If even that fails, the leases run out and the sweeper takes them."""
        s = self.scope
        s.log.warning(
            "starting %d %ss of %s took %.1fs of their %gs lease; running none of them and making them "
            "due again, so that none runs once its lease may have run out",
            len(rows),
            s.noun,
            s.place,
            took_s,
            self._lease_us / 1e6,
            extra={"event": f"{s.noun}.start_too_late", "source": self.src.name, "count": len(rows)},
        )
        try:
            with self.db.transaction() as cur:
                where = self._fence(self._entries(rows))
                self._trace(cur, where, "retry", None, RUNNING)
                self._run(cur, s.sql.snooze_delay.format(fence=where), 0, *s.where)
        except MYSQL_ERRORS as exc:
            s.log.warning("could not give back the late-started %ss: %s", s.noun, exc)
        return []

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

    def extend_leases(self, db: Database, entries: Sequence[Entry]) -> Extended:
        """Extend the leases still ours that no other session has locked; say which are lost.

        Runs on the lease keeper's own connection and never waits for a lock (SKIP LOCKED; a plain
        read): a row locked elsewhere, by this worker's own ack most often, is neither kept nor lost.
        """
        sql = self.scope.sql
        with db.transaction() as cur:
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

    def group_key(self, ack: Ack) -> Any:
        return finish_group(ack, self.scope.handler)

    # -- requeue -----------------------------------------------------------------------------------

    def requeue_expired(self, visibility_timeout_s: float, limit: int) -> int:
        """Lost entries (dispatched, never started) -> pending; interrupted runs -> pending or dead."""
        return self._requeue_dispatched(visibility_timeout_s, limit) + self.interrupt_expired(limit)

    def requeue_lost(self, limit: int) -> int:
        """Every DISPATCHED row no worker started -> pending now: Redis lost its entries.
        RUNNING ones are left to their leases: their workers hold them, entry or not."""
        return self._requeue_dispatched(0.0, limit)

    def requeue_interrupted(self, limit: int) -> int:
        return self.interrupt_expired(limit)

    def requeue_held(self, entries: Sequence[Entry]) -> int:
        """A dead worker's popped rows, never started -> pending now (fenced, as release_unpushed)."""
        return self.release_unpushed(entries)

    def _requeue_dispatched(self, after_s: float, limit: int) -> int:
        """DISPATCHED for longer than `after_s`, never started -> pending (no interruption: nothing ran)."""
        sql, where = self.scope.sql, self.scope.where
        with self.db.transaction() as cur:
            cur.execute(sql.find_expired_dispatched, (*self.scope.claim, _us(after_s), limit))
            found = [int(r[0]) for r in cur.fetchall()]
            if not found:
                return 0
            ids = self._ids(found)
            self._trace(cur, ids, "lost", None, DISPATCHED)
            return self._run(cur, sql.requeue_dispatched.format(ids=ids), *where)

    def interrupt_expired(self, limit: int) -> int:
        """RUNNING rows whose lease ran out: their worker died. Each such run is an interruption; only
        a row that ran alone can be dead for it (shared.policy.blame_interruptions)."""
        s = self.scope
        with self.db.transaction() as cur:
            cur.execute(s.sql.find_expired_running, (*s.claim, limit))
            found: list[Interrupted] = [(int(r[0]), int(r[1]), tuple(r[2:])) for r in cur.fetchall()]
            if not found:
                return 0
            dead = self._interrupt(cur, found, INTERRUPTED)
        observe.count(self.src.name, "dead", len(dead))
        return len(found)

    def interrupt_worker(self, worker: str, why: str, limit: int = 10_000) -> int:
        """RUNNING rows started by `worker`, a process its supervisor saw exit (waitpid: nothing of
        it can still run), -> interrupted now, as if their leases had run out: each an
        interruption (`why` is their last_error), blamed as the sweep blames. Never for a process
        that may still run (a stalled one keeps its leases). Returns the rows interrupted."""
        s, total = self.scope, 0
        while True:
            with self.db.transaction() as cur:
                cur.execute(s.sql.find_worker_running, (*s.claim, worker, limit))
                ids = [int(r[0]) for r in cur.fetchall()]
                if not ids:
                    return total
                cur.execute(s.sql.lock_worker_running.format(ids=self._ids(ids)), (*s.where, worker))
                found: list[Interrupted] = [(int(r[0]), int(r[1]), tuple(r[2:])) for r in cur.fetchall()]
                dead = self._interrupt(cur, found, why) if found else []
            observe.count(self.src.name, "dead", len(dead))
            total += len(found)
            if len(ids) < limit:
                return total

    def _interrupt(self, cur: Cursor, found: list[Interrupted], why: str) -> list[int]:
        """Interrupted runs (locked, RUNNING) -> pending again or dead; returns the dead ids. Only a
        row that ran alone can be dead for it (shared.policy.blame_interruptions)."""
        s, cap = self.scope, self.max_interruptions
        self._trace(cur, self._ids(i for i, _, _ in found), "interrupted", why, RUNNING)
        again, dead = blame_interruptions(found, cap)
        if again:
            self._run(cur, s.sql.interrupted_retry.format(ids=self._ids(again)), why, *s.where)
        if dead:
            text = f"dead: interrupted {cap} times; its worker keeps dying (killed, out of memory...)"
            self._run(cur, s.sql.interrupted_dead.format(ids=self._ids(dead)), text, *s.where)
            fields = {
                "event": f"{s.noun}.dead_interrupted",
                "source": self.src.name,
                f"{s.noun}_ids": dead,
            }
            s.log.error(
                "%d %s(s) of %s dead after %d interruptions",
                len(dead),
                s.noun,
                s.place,
                cap,
                extra=fields,
            )
        return dead

    def release_unpushed(self, entries: Sequence[Entry]) -> int:
        """Claimed but never pushed (Redis refused) -> pending now, fenced on the new attempt."""
        with self.db.transaction() as cur:
            stmt = self.scope.sql.release_unpushed.format(fence=self._fence(entries))
            return self._run(cur, stmt, *self.scope.where)

    def close(self) -> None:
        """Close this store's session (its lease keeper thread keeps the store itself alive)."""
        self.db.close()

    def reset_dispatched(self) -> int:
        """Every DISPATCHED or RUNNING row -> pending. Only when no dispatcher or worker runs."""
        with self.db.transaction() as cur:
            return self._run(cur, self.scope.sql.release_all, *self.scope.claim)

    # -- finishing, used by LeasedBatch; every statement fenced on (id, attempt) and RUNNING ----------

    def finish_ok(self, cur: Cursor, rows: Sequence[Row]) -> int:
        where = self._fence(self._entries(rows))
        return self._run(cur, self.scope.done.format(fence=where), *self.scope.where)

    def finish_failed(self, cur: Cursor, row: Row, outcome: object) -> str:
        """A failed run: "retried" (pending after the kind's delay) or "dead"; "" when it was stale."""
        text = error_text(outcome)
        delay_s = self._retry_in(row)
        if delay_s is None:
            return "dead" if self.finish_dead(cur, row, text, 1, outcome="failed") else ""
        where = self._fence(self._entries([row]))
        self._trace(cur, where, "failed", text, RUNNING)
        stmt = self.scope.sql.fail_retry.format(fence=where)
        return "retried" if self._run(cur, stmt, _us(delay_s), text, *self.scope.where) else ""

    def finish_dead(self, cur: Cursor, row: Row, text: str, errors: int, outcome: str = "dead") -> int:
        where = self._fence(self._entries([row]))
        self._trace(cur, where, outcome, text, RUNNING)
        return self._run(cur, self.scope.sql.fail_dead.format(fence=where), errors, text, *self.scope.where)

    def finish_special(self, cur: Cursor, row: Row, ack: Ack) -> int:
        """A handler's explicit retry (not a failure) or discard (dead now)."""
        s = self.scope
        if ack.action == "discard":
            text = f"discarded by its {s.author}" + (f": {ack.reason}" if ack.reason else "")
            return self.finish_dead(cur, row, text, 0, outcome="discarded")
        where = self._fence(self._entries([row]))
        self._trace(cur, where, "retry", None, RUNNING)
        if ack.at is not None:
            return self._run(cur, s.sql.snooze_at.format(fence=where), ack.at, *s.where)
        return self._run(cur, s.sql.snooze_delay.format(fence=where), _us(ack.delay_s), *s.where)

    # -- what a kind decides -------------------------------------------------------------------------

    @abstractmethod
    def _retry_in(self, row: Row) -> float | None:
        """The delay before a failed run's next attempt, or None when it is dead (the kind logs it)."""

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
