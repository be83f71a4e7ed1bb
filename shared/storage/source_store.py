"""The only class that runs SQL against a source table; one method per state transition.

claim_due (IDLE -> DISPATCHED), start (-> RUNNING, committed, leased until the batch closes),
finish / fail_rows (RUNNING -> IDLE, deleted or DISPATCHED, fenced; run by RowBatch), requeue_*
(back to IDLE, one method per cause). Callers never see a cursor.
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from typing import Any

from ..acks import Ack, Row, check_times
from ..entries import Entry
from ..limits import MAX_DELAY_S
from ..queries.source import START_TIME, SourceSQL, assignments, column_list, fence, in_list, render
from ..settings import SourceSettings
from ..states import ATTEMPT_COLUMN
from .db import Database
from .leased.keeper import Extended, LeaseKeeper, renew_leases
from .protocol import AckCounts, SkipsLocked, SourceStatus, StaleAck, StartUnknown, Store, WorkBatch
from .row_batch import AckGroups, RowBatch, check_settable, guarded, row_action_refusal
from .schema import check_source, described
from .units import MYSQL_ERRORS, CommitUnknown, Cursor, claiming, lock_or_skip

# Re-exported: the protocols live in storage.protocol (RowBatch uses them too), and the roles import
# them from here, as they always have.
__all__ = ["AckCounts", "SkipsLocked", "SourceStatus", "SourceStore", "StaleAck", "Store", "WorkBatch"]

log = logging.getLogger("duecast.worker")
STATUS_COUNT_CAP = 100_000  # due-backlog counts stop here: a bounded index read per status call
SKIPPED_LOCKED_CAP = 10_000  # rows held by others a claim counts at most (a bounded index read)


def _us(seconds: float) -> int:
    return round(seconds * 1_000_000)


@dataclass(frozen=True)
class _Begun:
    """What a start whose COMMIT got no answer did, if it committed: its rows (as read), how many
    were held elsewhere, when its leases began (time.monotonic()) and its own time (NOW(6))."""

    rows: list[Row]
    locked: int
    since: float
    at: Any


class SourceStore:
    def __init__(self, db: Database, src: SourceSettings, max_delay_s: float = MAX_DELAY_S) -> None:
        self.db = db
        self.src = src
        self.max_delay_s = max_delay_s  # jobs.max_delay_s: the most an Ack.touch may push a row
        self.sql: SourceSQL = render(src)
        self.columns: frozenset[str] = frozenset()
        self.id_column = src.id_column
        self.rows_per_entry = 1
        self.claim_weight = 1
        self._period_us = _us(src.period_s)
        self._lease_us = _us(src.lease_s)
        self.skipped_locked = 0  # due rows the last claim passed over: another session held them
        self.skipped_ids: frozenset[int] | None = None  # ...which (None: a full claim, not known)
        self.returning = 0  # the last claim's first entries that came back (claim_due)
        what = f"rows of {src.name}" if src.mode == "rows" else f"spans of {src.name}"
        self._leases = LeaseKeeper(self.extend_leases, src.lease_s, db.settings, what)

    def verify(self) -> None:
        """Check the table against the settings (start-up); remembers its columns for acks."""
        with self.db.transaction() as cur:
            info = described(cur, self.src.table, f"source {self.src.name}: table {self.src.table}")
        check_source(self.src, info)
        self.columns = frozenset(info.columns)

    def claim_due(self, limit: int) -> list[Entry]:
        """IDLE -> DISPATCHED for up to `limit` due rows, oldest first; committed on return.

        Sets `skipped_locked`: due rows the claim passed over because another session held them;
        and `returning`: how many of the entries, put first, are rows coming back (requeued, given
        back, a lease run out), not due by their period. A COMMIT cut off raises CommitUnknown
        naming the entries it may have made."""
        claimed: list[Entry] = []
        with claiming(claimed), self.db.transaction() as cur:
            cur.execute(self.sql.claim_due, (self._period_us, self._period_us, limit))
            found = cur.fetchall()
            self.skipped_ids = self._skipped_locked(cur, limit, {int(r[0]) for r in found})
            self.skipped_locked = len(self.skipped_ids or ())
            self.returning = 0
            if not found:
                return []
            cur.execute(
                self.sql.mark_dispatched.format(ids=in_list(self.sql.id_column, (r[0] for r in found)))
            )
            # Rows coming back first, each part in claim order: the first `returning` are pushed
            # ahead of the ready list's backlog (Redelivery.push_claimed), as a job queue's are.
            back = [Entry(int(i), int(a) + 1) for i, a, again in found if again]
            self.returning = len(back)
            claimed += back + [Entry(int(i), int(a) + 1) for i, a, again in found if not again]
        return claimed

    def _skipped_locked(self, cur: Cursor, limit: int, claimed: set[int]) -> frozenset[int] | None:
        """A claim short of its limit walked every due row: each one a plain read sees that it did
        not take was held by another session. (A full claim's skipped rows show at the next short
        one: None.) One indexed read of ids, capped at SKIPPED_LOCKED_CAP."""
        if len(claimed) >= limit:
            return None
        cur.execute(self.sql.due_visible, (self._period_us, len(claimed) + SKIPPED_LOCKED_CAP))
        return frozenset(int(r[0]) for r in cur.fetchall()) - claimed

    # -- start and leases ------------------------------------------------------------------------

    @contextmanager
    def started(self, entries: Sequence[Entry], columns: Sequence[str] = ()) -> Iterator[RowBatch]:
        """`start`, then `close` when the block ends, however it ends."""
        batch = self.start(entries, columns)
        try:
            yield batch
        finally:
            batch.close()

    def start(self, entries: Sequence[Entry], columns: Sequence[str] = ()) -> RowBatch:
        """DISPATCHED -> RUNNING for the rows whose (id, attempt) is still dispatched, in one short
        transaction, committed on return: no lock is held while their handlers run, and no copy of
        their entries matches any more. Until `batch.close()` the lease keeper renews their leases
        (dc_dispatched_at), so a long check is not taken for an interrupted one.

        `columns` limits what is read (the id and attempt always come too; empty means all).
        Stale or deleted rows are left out; so are rows another session (an application's
        transaction) still holds after the session's lock wait (mysql.lock_wait_s).
        """
        if not entries:
            raise ValueError("start() needs at least one entry")
        wanted = list(dict.fromkeys([self.src.id_column, ATTEMPT_COLUMN, *columns])) if columns else []
        args = {"columns": column_list(wanted), "fence": fence(entries, self.sql.id_column)}
        rows: list[Row] = []
        try:
            with self.db.transaction(check=True) as cur:
                rows, locked = self._lock(cur, args)
                since = time.monotonic()  # before the leases' NOW(6): the keeper counts from here
                if rows:
                    cur.execute(START_TIME)
                    at = _scalar(cur)  # this start's own time: what marks the rows as its own
                    cur.execute(self.sql.mark_running.format(fence=self._fence(rows)), (at,))
        except CommitUnknown as exc:
            if not rows:
                raise  # it wrote nothing: running it again is all there is to do
            begun = _Begun(list(rows), locked, since, at)
            raise StartUnknown(exc, partial(self._resume, entries, columns, begun)) from exc
        return self._begun(rows, len(entries), locked, since)

    def _begun(self, rows: list[Row], entries: int, locked: int, since: float) -> RowBatch:
        """The batch of the rows a start of `entries` entries committed, their leases kept from
        `since` on; or of none, when the commit came too late to run them."""
        if rows and not self._leases.in_time(since):
            self._give_back_late(rows, time.monotonic() - since)
            rows = []
        batch = RowBatch(self, rows, entries - len(rows), locked)
        if rows:
            batch.keep(self._leases.holding(batch.entries, since))
        return batch

    def _resume(self, entries: Sequence[Entry], columns: Sequence[str], begun: _Begun) -> RowBatch:
        """A start whose COMMIT got no answer (StartUnknown), settled: the rows still RUNNING under
        their attempt since its time are the ones it started, run now under that attempt (they
        wait for no lease and count no interruption); found none, it did not commit, and the entries
        are started again."""
        rows, since = begun.rows, begun.since
        with self.db.transaction(check=True) as cur:
            cur.execute(self.sql.started_by.format(fence=self._fence(rows)), (begun.at,))
            mine = {int(r[0]) for r in cur.fetchall()}
        log.warning(
            "a start of %d rows of %s got no answer to its COMMIT; it had %s",
            len(rows),
            self.src.name,
            f"committed: running its {len(mine)} rows under their attempt" if mine else "not: starting again",
            extra={"event": "worker.start_settled", "source": self.src.name, "count": len(mine)},
        )
        if not mine:
            return self.start(entries, columns)
        key = self.src.id_column
        return self._begun([r for r in rows if int(r[key]) in mine], len(entries), begun.locked, since)

    def _lock(self, cur: Cursor, args: dict[str, str]) -> tuple[list[Row], int]:
        """The rows still DISPATCHED under their entry's attempt, locked; rows another live session
        holds past the lock wait are skipped. Returns them and how many were held elsewhere."""
        skipping: list[bool] = []

        def skip_locked() -> int:
            skipping.append(True)
            return int(cur.execute(self.sql.lock_dispatched_skip.format(**args)))

        lock_or_skip(lambda: cur.execute(self.sql.lock_dispatched.format(**args)), skip_locked)
        names = [d[0] for d in cur.description or ()]
        rows = [dict(zip(names, values, strict=True)) for values in cur.fetchall()]
        if not skipping:
            return rows, 0
        # A plain read sees the current rows the skipping read could not lock.
        cur.execute(self.sql.count_dispatched.format(fence=args["fence"]))
        row = cur.fetchone()
        return rows, max(0, int(row[0]) - len(rows)) if row else 0

    def _give_back_late(self, rows: list[Row], took_s: float) -> None:
        """A start whose commit stalled so long that the leases may run out (or have) before the
        keeper confirms one: run nothing (another worker may take the rows the moment a lease ends)
        and make them due again now. If even that fails, the leases run out and redelivery takes them."""
        log.warning(
            "starting %d rows of %s took %.1fs of their %gs lease; running none of them and making "
            "them due again, so that none runs once its lease may have run out",
            len(rows),
            self.src.name,
            took_s,
            self.src.lease_s,
            extra={"event": "source.start_too_late", "source": self.src.name, "count": len(rows)},
        )
        self.give_back(rows)

    def give_back(self, rows: Sequence[Row]) -> None:
        """Started rows that never ran -> IDLE, due as before (fenced on RUNNING); best effort."""
        try:
            with self.db.transaction() as cur:
                cur.execute(self.sql.give_back.format(fence=self._fence(rows)))
        except MYSQL_ERRORS as exc:
            log.warning("could not give back %d started rows of %s: %s", len(rows), self.src.name, exc)

    def extend_leases(self, db: Database, entries: Sequence[Entry]) -> Extended:
        """Renew the leases still ours that no other session has locked; say which are lost. Runs
        on the lease keeper's own connection and never waits for a lock."""
        s = self.sql
        with db.transaction() as cur:
            return renew_leases(
                cur, entries, self._entry_fence, lock=s.lock_leased, extend=s.extend_lease, read=s.leased
            )

    # -- finishing, run by RowBatch (and range mode) in its transaction; fenced on RUNNING ---------

    def group_key(self, ack: Ack) -> Any:
        """Rows with equal keys share one statement. A bad Ack raises ValueError (its row fails
        alone, logged by the worker): an action a source's row has no meaning for, a delay past
        jobs.max_delay_s, or a column that is not the handler's to set."""
        action = self.src.on_success if ack.action == "default" else ack.action
        if action not in ("touch", "delete"):
            raise ValueError(row_action_refusal(ack, self.src.name))
        check_times(ack, self.max_delay_s)
        if action == "delete":
            return ("delete",)
        for name, _ in ack.values:
            check_settable(name, self.src, self.columns)
        try:
            hash(ack.values)
            return ("touch", ack.delay_s, ack.values)
        except TypeError:  # unhashable values (lists...): this row gets its own statement
            return ("touch", ack.delay_s, ack.values, id(ack))

    def ack_groups(self, acks: Sequence[tuple[Row, Ack]]) -> AckGroups:
        """Rows by the statement that acks them; a bad Ack raises ValueError here, before any SQL."""
        groups: AckGroups = defaultdict(list)
        keys: dict[int, Any] = {}  # by identity: most rows share one Ack object (acks keeps it alive)
        for row, ack in acks:
            key = keys.get(id(ack))
            if key is None:
                key = keys[id(ack)] = self.group_key(ack)
            groups[key].append(row)
        return groups

    def finish(self, cur: Cursor, groups: AckGroups) -> AckCounts:
        """Run the fenced ack statements; rows whose values the database refuses fail alone."""
        acked = stale = 0
        refused: list[Row] = []
        for key, rows in groups.items():
            done, bad = guarded(cur, rows, partial(self.run_ack, cur, key), self.src)
            acked += done
            stale += len(rows) - len(bad) - done
            refused.extend(bad)
        if refused:
            self.fail_rows(cur, refused)
        return AckCounts(acked, stale, len(refused))

    def run_ack(self, cur: Cursor, key: Any, rows: list[Row]) -> int:
        """One fenced ack statement for `rows`; returns how many rows it really changed."""
        where = self._fence(rows)
        if key[0] == "delete":
            return int(cur.execute(self.sql.ack_delete.format(fence=where), (len(rows),)))
        values = key[2]
        stmt = self.sql.ack_touch.format(set=assignments([n for n, _ in values]), fence=where)
        return int(cur.execute(stmt, (_us(key[1]), *(v for _, v in values))))

    def fail_rows(self, cur: Cursor, rows: Sequence[Row]) -> int:
        """Failed checks: a re-scan row due again at its next period; a one-off row left DISPATCHED,
        under a new attempt, for the sweeper's visibility timeout. Returns the rows still ours."""
        stmt = self.sql.fail_rescan if self.src.period_s > 0 else self.sql.fail_oneoff
        return int(cur.execute(stmt.format(fence=self._fence(rows))))

    def lock_running(self, cur: Cursor, rows: Sequence[Row]) -> set[int]:
        """Lock the rows still RUNNING under the attempt they carry; returns their ids (range mode)."""
        cur.execute(self.sql.lock_running.format(fence=self._fence(rows)))
        return {int(r[0]) for r in cur.fetchall()}

    def lock_attempt(self, cur: Cursor, entries: Sequence[Entry]) -> set[int]:
        """Lock the rows still at the entries' attempts, in any state; returns their ids (range mode)."""
        cur.execute(self.sql.lock_attempt.format(fence=self._entry_fence(entries)))
        return {int(r[0]) for r in cur.fetchall()}

    def entries(self, rows: Sequence[Row]) -> list[Entry]:
        key = self.src.id_column
        return [Entry(int(r[key]), int(r[ATTEMPT_COLUMN])) for r in rows]

    def _fence(self, rows: Sequence[Row]) -> str:
        return self._entry_fence(self.entries(rows))

    def _entry_fence(self, entries: Iterable[Entry]) -> str:
        return fence(entries, self.sql.id_column)

    # -- requeue, by cause ---------------------------------------------------------------------------

    def requeue_expired(self, visibility_timeout_s: float, limit: int) -> int:
        """DISPATCHED rows never started (or failed, one-off) in time -> IDLE."""
        with self.db.transaction() as cur:
            cur.execute(self.sql.find_expired, (_us(visibility_timeout_s), limit))
            ids = [r[0] for r in cur.fetchall()]
            if not ids:
                return 0
            return int(cur.execute(self.sql.requeue.format(ids=in_list(self.sql.id_column, ids))))

    def requeue_lost(self, limit: int, dispatched_s: float = 0.0) -> int:
        """Every DISPATCHED row (dispatched at least `dispatched_s` ago) -> IDLE now: their entries
        were lost with Redis. RUNNING rows are left to their leases: their workers hold them."""
        return self.requeue_expired(dispatched_s, limit)

    def requeue_interrupted(self, limit: int) -> int:
        """RUNNING rows whose lease ran out (their worker died or stopped) -> IDLE, due at once.
        The attempt is untouched: the next claim bumps it, and the dead worker's late ack, fenced
        on RUNNING, matches nothing meanwhile."""
        with self.db.transaction() as cur:
            cur.execute(self.sql.find_interrupted, (self._lease_us, limit))
            ids = [r[0] for r in cur.fetchall()]
            if not ids:
                return 0
            stmt = self.sql.requeue_interrupted.format(ids=in_list(self.sql.id_column, ids))
            return int(cur.execute(stmt))

    def requeue_held(self, entries: Sequence[Entry]) -> int:
        """Rows a dead worker had popped and not started -> IDLE now (fenced on the attempt it held)."""
        return self.release_unpushed(entries)

    def requeue_started(self, entries: Sequence[Entry]) -> int:
        """Rows an exited worker had started (its started records) -> IDLE, due now: fenced on
        RUNNING under the attempt it started them with, so what it acked, or what was claimed again
        since, is untouched (storage.protocol.StartsUnnamed)."""
        with self.db.transaction() as cur:
            return int(cur.execute(self.sql.requeue_started.format(fence=self._entry_fence(entries))))

    def release_unpushed(self, entries: Sequence[Entry]) -> int:
        """Rows this dispatcher claimed but could not push -> IDLE (fenced on their new attempt)."""
        with self.db.transaction() as cur:
            stmt = self.sql.release_unpushed.format(fence=self._entry_fence(entries))
            return int(cur.execute(stmt))

    def close(self) -> None:
        """Close this store's session (a lease keeper thread keeps the store itself alive)."""
        self.db.close()

    def reset_dispatched(self) -> int:
        """Every DISPATCHED or RUNNING row -> IDLE. Only when no dispatcher or worker runs (demo start-up)."""
        with self.db.transaction() as cur:
            return int(cur.execute(self.sql.release_all))

    def status(self) -> SourceStatus:
        with self.db.transaction() as cur:
            cur.execute(self.sql.count_due, (self._period_us, STATUS_COUNT_CAP))
            due = _scalar(cur)
            cur.execute(self.sql.count_in_flight)
            in_flight = _scalar(cur)
            cur.execute(self.sql.oldest_due_age, (self._period_us,))
            row = cur.fetchone()
        age = None if row is None or row[0] is None else float(row[0]) / 1e6
        return SourceStatus(int(due or 0), int(in_flight or 0), age)


def _scalar(cur: Cursor) -> Any:
    row = cur.fetchone()
    return None if row is None else row[0]
