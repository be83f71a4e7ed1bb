"""The only class that runs SQL against a source table; one method per state transition.

claim_due (IDLE -> DISPATCHED), started (lock a batch for work), Batch.ack (DISPATCHED -> IDLE or
deleted, fenced), requeue_* (DISPATCHED -> IDLE, one method per cause). Callers never see a cursor.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from functools import partial
from typing import Any, Protocol, runtime_checkable

from duecast.shared.acks import Ack, Row
from duecast.shared.fanout.keys import Entry
from duecast.shared.queries.source import SourceSQL, assignments, column_list, fence, in_list, render
from duecast.shared.settings import SourceSettings
from duecast.shared.states import ATTEMPT_COLUMN, DISPATCH_COLUMNS
from duecast.shared.storage.db import Database
from duecast.shared.storage.schema import check_source, describe
from duecast.shared.storage.units import VALUE_ERRORS, Cursor, lock_or_skip, savepoint

STATUS_COUNT_CAP = 100_000  # due-backlog counts stop here: a bounded index read per status call


def _us(seconds: float) -> int:
    return round(seconds * 1_000_000)


@dataclass(frozen=True)
class AckCounts:
    acked: int
    stale: int  # acks whose (id, attempt, state) no longer matched: counted and dropped
    refused: int = 0  # acks whose values the database refused: those rows failed


def guarded(cur: Cursor, rows: list[Row], run: Callable[[list[Row]], int]) -> tuple[int, list[Row]]:
    """Run `run(rows)` under a savepoint; if the database refuses a value, undo just that statement
    and run the rows one by one, so one bad value cannot roll back a whole batch.

    Returns (what `run` counted, the rows the database refused).
    """
    try:
        return _saved(cur, rows, run), []
    except VALUE_ERRORS:
        if len(rows) == 1:
            return 0, rows
    done, refused = 0, []
    for row in rows:
        try:
            done += _saved(cur, [row], run)
        except VALUE_ERRORS:
            refused.append(row)
    return done, refused


def _saved(cur: Cursor, rows: list[Row], run: Callable[[list[Row]], int]) -> int:
    with savepoint(cur, "dc_ack"):
        return run(rows)


SKIPPED_LOCKED_CAP = 10_000  # rows held by others a claim counts at most (a bounded index read)


class StaleAck(RuntimeError):
    """An ack found rows no longer matching their fence where that cannot be dropped row by row."""

    def __init__(self, count: int, why: str) -> None:
        super().__init__(f"{count} stale: {why}")
        self.count = count


@dataclass(frozen=True)
class SourceStatus:
    due: int  # capped at STATUS_COUNT_CAP
    in_flight: int
    oldest_due_age_s: float | None  # None when the table is empty
    unit: str = "rows"  # what due / in_flight count: rows, or ranges in range mode
    fresh_share: float | None = None  # range mode: share of rows checked within period + 1 s
    detail: dict[str, int] | None = None  # job queues: jobs per state (pending, due, scheduled...)


class WorkBatch(Protocol):
    """Work a store started for a worker: committed RUNNING under leases the store keeps until
    close(). No transaction or row lock is open while its handlers run; each ack or fail is a
    short fenced transaction of its own, for any subset of the rows, as they finish."""

    rows: list[Row]
    skipped: int  # entries not started: stale, deleted, or held by another worker
    # Entries locked but left to start later, one group at a time after this batch is finished
    # (leased stores: suspects, shared.policy.start_groups); empty for the others.
    later: list[list[Entry]]

    def ack(self, acks: Sequence[tuple[Row, Ack]]) -> AckCounts: ...
    def fail(self, failures: Sequence[tuple[Row, object]]) -> None: ...
    # Finish what waits on time rather than on outcomes (range mode: a span whose last rows
    # straggle); called now and then while rows are in flight.
    def settle(self) -> AckCounts: ...
    def close(self) -> None: ...  # stop keeping leases: every row has been acked or failed


@runtime_checkable
class SkipsLocked(Protocol):
    """A store whose claims, or a batch whose start, report the rows they passed over because
    another session held their lock (row mode, and range mode's ranges): counted as `locked_skipped`."""

    skipped_locked: int  # in the last claim, or in this batch's start


class Store(Protocol):
    """What the roles need from a source's store (row mode: SourceStore; range mode: RangeStore)."""

    @property
    def src(self) -> SourceSettings: ...
    @property
    def id_column(self) -> str: ...  # the business table's key, as in the rows handlers get
    @property
    def rows_per_entry(self) -> int: ...  # 1, or range_size in range mode

    def verify(self) -> None: ...
    def claim_due(self, limit: int) -> list[Entry]: ...
    def start(self, entries: Sequence[Entry], columns: Sequence[str] = ()) -> WorkBatch: ...
    def started(
        self, entries: Sequence[Entry], columns: Sequence[str] = ()
    ) -> AbstractContextManager[WorkBatch]: ...  # start, and close when the block ends
    def group_key(self, ack: Ack) -> Any: ...
    # Redelivery, one method per cause (dispatcher/redelivery.py runs them; shared/policy.py: CAUSES).
    def requeue_expired(self, visibility_timeout_s: float, limit: int) -> int: ...  # not acked in time
    def requeue_lost(self, limit: int) -> int: ...  # Redis lost its entries: every unstarted one, now
    def requeue_interrupted(self, limit: int) -> int: ...  # a running lease ran out (jobs, groups)
    def requeue_held(self, entries: Sequence[Entry]) -> int: ...  # popped by a worker now dead
    def release_unpushed(self, entries: Sequence[Entry]) -> int: ...  # claimed, push refused
    def reset_dispatched(self) -> int: ...
    def status(self) -> SourceStatus: ...


class Batch:
    """Rows locked for one worker batch, inside an open transaction; `ack` runs in that transaction."""

    def __init__(
        self, store: SourceStore, cur: Cursor, rows: list[Row], skipped: int, locked: int = 0
    ) -> None:
        self._store = store
        self.cursor = cur  # range mode reads business rows in this same transaction
        self.rows = rows
        self.skipped = skipped
        self.skipped_locked = locked  # of `skipped`: current rows another session held past the lock wait
        self.later: list[list[Entry]] = []

    def phases(self) -> list[list[Row]]:
        return [self.rows] if self.rows else []

    def ack(self, acks: Sequence[tuple[Row, Ack]]) -> AckCounts:
        """Apply each row's Ack as fenced, batched statements; rows with equal acks share one.

        Rows whose values the database refuses fail alone (their attempt is burnt).
        """
        groups: dict[Any, list[Row]] = defaultdict(list)
        for row, ack in acks:
            groups[self._store.group_key(ack)].append(row)
        acked = stale = 0
        refused: list[Row] = []
        for key, rows in groups.items():
            done, bad = guarded(self.cursor, rows, partial(self._store.run_ack, self.cursor, key))
            acked += done
            stale += len(rows) - len(bad) - done
            refused.extend(bad)
        if refused:
            self._store.burn_attempts(self.cursor, refused)
        return AckCounts(acked, stale, len(refused))

    def fail(self, failures: Sequence[tuple[Row, object]]) -> None:
        """Leave failed rows to the sweeper, under a new attempt no copy of their entry matches.

        (The outcome - exception or bad ack - is logged by the worker; a row keeps no error.)
        """
        if failures:
            self._store.burn_attempts(self.cursor, [row for row, _ in failures])


class SourceStore:
    def __init__(self, db: Database, src: SourceSettings) -> None:
        self.db = db
        self.src = src
        self.sql: SourceSQL = render(src)
        self.columns: frozenset[str] = frozenset()
        self.id_column = src.id_column
        self.rows_per_entry = 1
        self._period_us = _us(src.period_s)
        self.skipped_locked = 0  # due rows the last claim passed over: another session held them

    def verify(self) -> None:
        """Check the table against the settings (start-up); remembers its columns for acks."""
        with self.db.transaction() as cur:
            info = describe(cur, self.src.table)
        check_source(self.src, info)
        self.columns = frozenset(info.columns)

    def claim_due(self, limit: int) -> list[Entry]:
        """IDLE -> DISPATCHED for up to `limit` due rows, oldest first; committed on return.

        Sets `skipped_locked`: due rows the claim passed over because another session held them."""
        with self.db.transaction() as cur:
            cur.execute(self.sql.claim_due, (self._period_us, limit))
            found = cur.fetchall()
            self.skipped_locked = self._skipped_locked(cur, limit, len(found))
            if not found:
                return []
            cur.execute(
                self.sql.mark_dispatched.format(ids=in_list(self.sql.id_column, (r[0] for r in found)))
            )
        return [Entry(int(i), int(a) + 1) for i, a in found]

    def _held_elsewhere(self, cur: Cursor, fence: str, locked: int) -> int:
        """After the skipping read: current rows of the batch that a plain read sees and it could not lock."""
        cur.execute(self.sql.count_dispatched.format(fence=fence))
        row = cur.fetchone()
        return max(0, int(row[0]) - locked) if row else 0

    def _skipped_locked(self, cur: Cursor, limit: int, claimed: int) -> int:
        """A claim short of its limit walked every due row: each one a plain read sees that it did
        not take was held by another session. (A full claim's skipped rows show at the next short
        one.) One indexed count, capped at SKIPPED_LOCKED_CAP."""
        if claimed >= limit:
            return 0
        cur.execute(self.sql.due_visible, (self._period_us, claimed + SKIPPED_LOCKED_CAP))
        row = cur.fetchone()
        return max(0, int(row[0]) - claimed) if row else 0

    @contextmanager
    def started(self, entries: Sequence[Entry], columns: Sequence[str] = ()) -> Iterator[Batch]:
        """Lock the rows whose (id, attempt) is still dispatched; commit acks when the block ends.

        `columns` limits what is read (the id and attempt always come too; empty means all).
        Stale or deleted rows are left out; so are rows another worker still holds after the
        session's lock wait (mysql.lock_wait_s): a duplicate entry being worked on elsewhere.
        """
        if not entries:
            raise ValueError("started() needs at least one entry")
        wanted = list(dict.fromkeys([self.src.id_column, ATTEMPT_COLUMN, *columns])) if columns else []
        args = {"columns": column_list(wanted), "fence": fence(entries, self.sql.id_column)}
        with self.db.transaction(check=True) as cur:
            skipping: list[bool] = []

            def skip_locked() -> int:
                skipping.append(True)
                return int(cur.execute(self.sql.lock_dispatched_skip.format(**args)))

            # Rows another live worker holds are left to it: take what is free.
            lock_or_skip(lambda: cur.execute(self.sql.lock_dispatched.format(**args)), skip_locked)
            names = [d[0] for d in cur.description or ()]
            rows = [dict(zip(names, values, strict=True)) for values in cur.fetchall()]
            locked = self._held_elsewhere(cur, args["fence"], len(rows)) if skipping else 0
            yield Batch(self, cur, rows, len(entries) - len(rows), locked)

    def group_key(self, ack: Ack) -> Any:
        action = self.src.on_success if ack.action == "default" else ack.action
        if action == "delete":
            return ("delete",)
        for name, _ in ack.values:
            if name not in self.columns or name in DISPATCH_COLUMNS:
                raise ValueError(
                    f"Ack sets {name!r}, which is not a column a handler may set in {self.src.table}"
                )
        try:
            hash(ack.values)
            return ("touch", ack.delay_s, ack.values)
        except TypeError:  # unhashable values (lists...): this row gets its own statement
            return ("touch", ack.delay_s, ack.values, id(ack))

    def run_ack(self, cur: Cursor, key: Any, rows: list[Row]) -> int:
        """Run one fenced ack statement for `rows`; returns how many rows it really changed."""
        where = self._fence(rows)
        if key[0] == "delete":
            return int(cur.execute(self.sql.ack_delete.format(fence=where)))
        values = key[2]
        stmt = self.sql.ack_touch.format(set=assignments([n for n, _ in values]), fence=where)
        return int(cur.execute(stmt, (_us(key[1]), *(v for _, v in values))))

    def burn_attempts(self, cur: Cursor, rows: Sequence[Row]) -> None:
        cur.execute(self.sql.burn_attempt.format(fence=self._fence(rows)))

    def _fence(self, rows: Sequence[Row]) -> str:
        key = self.src.id_column
        return fence((Entry(int(r[key]), int(r[ATTEMPT_COLUMN])) for r in rows), self.sql.id_column)

    def requeue_expired(self, visibility_timeout_s: float, limit: int) -> int:
        """Abandoned DISPATCHED rows (not acked in time, not locked by a worker) -> IDLE."""
        with self.db.transaction() as cur:
            cur.execute(self.sql.find_expired, (_us(visibility_timeout_s), limit))
            ids = [r[0] for r in cur.fetchall()]
            if not ids:
                return 0
            return int(cur.execute(self.sql.requeue.format(ids=in_list(self.sql.id_column, ids))))

    def requeue_lost(self, limit: int) -> int:
        """Every DISPATCHED row no worker holds -> IDLE now: their entries were lost with Redis."""
        return self.requeue_expired(0.0, limit)

    def requeue_interrupted(self, limit: int) -> int:
        """Nothing: a row is never leased; a worker holds it by its row lock, which dies with it."""
        return 0

    def requeue_held(self, entries: Sequence[Entry]) -> int:
        """Rows a dead worker had popped -> IDLE now (fenced on the attempt it held)."""
        return self.release_unpushed(entries)

    def release_unpushed(self, entries: Sequence[Entry]) -> int:
        """Rows this dispatcher claimed but could not push -> IDLE (fenced on their new attempt)."""
        with self.db.transaction() as cur:
            stmt = self.sql.release_unpushed.format(fence=fence(entries, self.sql.id_column))
            return int(cur.execute(stmt))

    def reset_dispatched(self) -> int:
        """Every DISPATCHED row -> IDLE. Only when no dispatcher or worker runs (demo start-up)."""
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
