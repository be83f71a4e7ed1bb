"""Rows a SourceStore started for one worker batch (row mode, and range mode's spans): their leases
kept until close(), and their fenced finishes, each a short transaction retried as a unit.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from contextlib import AbstractContextManager
from typing import Any, Protocol, TypeVar

from ..acks import Ack, Row
from ..entries import Entry
from ..limits import storable_text
from ..settings import SourceSettings
from ..states import DISPATCH_COLUMNS
from .db import Database
from .leased.keeper import Hold
from .protocol import NO_ACKS, AckCounts
from .units import Cursor, retry_transient, savepoint, whole_unit

log = logging.getLogger("duecast.worker")
FINISH_RETRIES = 3
T = TypeVar("T")
AckGroups = dict[Any, list[Row]]  # rows by group_key: one fenced statement each


class RowOwner(Protocol):
    """What a RowBatch asks of the store that started it (SourceStore), named here so that the
    batch does not import its store back."""

    db: Database
    src: SourceSettings

    def entries(self, rows: Sequence[Row]) -> list[Entry]: ...
    def ack_groups(self, acks: Sequence[tuple[Row, Ack]]) -> AckGroups: ...
    def finish(self, cur: Cursor, groups: AckGroups) -> AckCounts: ...
    def fail_rows(self, cur: Cursor, rows: Sequence[Row]) -> int: ...
    def give_back(self, rows: Sequence[Row]) -> None: ...


def guarded(
    cur: Cursor, rows: list[Row], run: Callable[[list[Row]], int], src: SourceSettings
) -> tuple[int, list[Row]]:
    """Run `run(rows)` under a savepoint; if anything but a transient error stops it (a value the
    database refuses, an overflow, text the driver cannot encode), undo just that statement and run
    the rows one by one, so one bad value cannot roll back, or stall, a whole batch. Each row
    refused is logged, naming it and why (rate-limited: shared/process/logs.RepeatFilter).

    Returns (what `run` counted, the rows refused).
    """
    try:
        return _saved(cur, rows, run), []
    except Exception as exc:
        if whole_unit(exc):  # read-only too: the unit, not this row
            raise
        if len(rows) == 1:
            _log_refused(src, rows[0], exc)
            return 0, rows
    done, refused = 0, []
    for row in rows:
        try:
            done += _saved(cur, [row], run)
        except Exception as exc:
            if whole_unit(exc):
                raise
            _log_refused(src, row, exc)
            refused.append(row)
    return done, refused


def _saved(cur: Cursor, rows: list[Row], run: Callable[[list[Row]], int]) -> int:
    with savepoint(cur, "dc_ack"):
        return run(rows)


def _log_refused(src: SourceSettings, row: Row, exc: BaseException) -> None:
    why = storable_text(str(exc) or type(exc).__name__, 500)
    log.warning(
        "row %s of %s: the database refused its ack (%s); it fails alone",
        row.get(src.id_column),
        src.name,
        why,
        extra={"event": "worker.ack_refused", "source": src.name, "row_id": row.get(src.id_column)},
    )


def row_action_refusal(ack: Ack, source: str) -> str:
    """Why a source's row may not take `ack` (retry, discard, a transactional task's): refused
    rather than read as a touch, which would check the row again a period later, not when asked."""
    return (
        f"Ack.{ack.action}() is for jobs and consumer groups; a row of source {source} takes "
        "Ack.touch(delay_s=...) to be checked later, Ack.delete() or None"
    )


def check_settable(name: str, src: SourceSettings, columns: frozenset[str]) -> None:
    """Refuse (ValueError) a column a handler's Ack.touch may not set in `src`'s table: duecast's
    own dispatch columns, the row's id (it would move the row) and its due column (it would take
    the row out of rotation, or bring it back early: push a check with delay_s instead)."""
    if name == src.due_column:
        raise ValueError(
            f"Ack.touch sets {name!r}, the due column of source {src.name}; duecast sets it "
            "(to check the row later, use Ack.touch(delay_s=...))"
        )
    if name == src.id_column or name in DISPATCH_COLUMNS:
        raise ValueError(
            f"Ack.touch sets {name!r}, duecast's own column of source {src.name}; a handler may not"
        )
    if name not in columns:
        raise ValueError(f"Ack sets {name!r}, which is not a column of {src.table}")


class RowBatch:
    """Rows started (RUNNING, committed) for one worker batch. `ack` and `fail` each commit on their
    own, for any subset of the rows, retried as units on transient errors."""

    def __init__(self, store: RowOwner, rows: list[Row], skipped: int, locked: int = 0) -> None:
        self._store = store
        self.rows = rows
        self.skipped = skipped
        self.skipped_locked = locked  # of `skipped`: current rows another session held past the lock wait
        self.later: list[list[Entry]] = []
        self.suspects = False  # never interrupted-and-blamed: rows and spans have no such count
        self.entries = store.entries(rows)
        self.hold: Hold | None = None  # the lease keeper's, until close()
        self._kept: AbstractContextManager[Hold] | None = None

    def keep(self, holding: AbstractContextManager[Hold]) -> None:
        """Keep the batch's leases (the keeper's `holding`) until close()."""
        self.hold = holding.__enter__()
        self._kept = holding

    def close(self) -> None:
        """The batch is over: its leases are no longer extended. Rows neither acked nor failed by
        now stay RUNNING until their lease runs out, and are then requeued as interrupted."""
        kept, self._kept, self.hold = self._kept, None, None
        if kept is not None:
            kept.__exit__(None, None, None)

    def settle(self) -> AckCounts:
        """Nothing to settle: each row is finished by its own ack or fail."""
        return NO_ACKS

    def phases(self) -> list[list[Row]]:
        return [self.rows] if self.rows else []

    def finishing(self, rows: Iterable[Row]) -> None:
        """Tell the lease keeper these rows' finish begins: their leaving RUNNING is not a lost lease."""
        if self.hold is not None:
            key = self._store.src.id_column
            self.hold.finishing(int(r[key]) for r in rows)

    def retrying(self, unit: Callable[[], T]) -> T:
        """Run a finishing transaction again after a transient error. Every finish is fenced on
        (id, attempt) and RUNNING, so running it again after a COMMIT that did land changes nothing
        (those rows then count as stale)."""
        what = f"finishing rows of {self._store.src.name}"
        return retry_transient(unit, what=what, redo="the finish", retries=FINISH_RETRIES, log=log)

    def ack(self, acks: Sequence[tuple[Row, Ack]]) -> AckCounts:
        """Apply each row's Ack in one transaction: fenced statements, rows with equal acks sharing
        one. Rows whose values the database refuses fail alone (see `fail`)."""
        if not acks:
            return NO_ACKS
        groups = self._store.ack_groups(acks)  # a bad Ack is refused before anything is written
        self.finishing(row for row, _ in acks)

        def once() -> AckCounts:
            with self._store.db.transaction() as cur:
                return self._store.finish(cur, groups)

        return self.retrying(once)

    def fail(self, failures: Sequence[tuple[Row, object]]) -> None:
        """Failed checks (the outcome, an exception or a bad ack, is logged by the worker; a row
        keeps no error): a re-scan row is checked again at its next period, a one-off row is left
        DISPATCHED for the sweeper under a new attempt."""
        if not failures:
            return
        rows = [row for row, _ in failures]
        self.finishing(rows)

        def once() -> int:
            with self._store.db.transaction() as cur:
                return self._store.fail_rows(cur, rows)

        self.retrying(once)

    def give_back(self) -> int:
        """Nothing was run after all (range mode could not read the spans' rows, or a worker leaving
        with stuck threads never began them): stop keeping the leases and make the rows due again
        now, as a late start does. Returns the rows given back (best effort: see the store's)."""
        self.close()
        if self.rows:
            self._store.give_back(self.rows)
        return len(self.rows)
