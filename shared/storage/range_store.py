"""Range mode's store: dispatch state per span of ids, business rows read by PK range, written on change.

Claims, locks, fenced acks and requeues of ranges are the row-mode SourceStore on the ranges table;
this class adds what happens to the business rows inside a locked range. It runs all of range
mode's SQL (text in shared.queries.source).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from functools import partial
from operator import itemgetter
from typing import Any

from duecast.shared.acks import Ack, Row
from duecast.shared.fanout.keys import Entry
from duecast.shared.identifiers import quote
from duecast.shared.queries.ranges import range_source, ranges_table
from duecast.shared.queries.source import assignments, column_list, in_list, render_ranges, spans
from duecast.shared.settings import SourceSettings
from duecast.shared.states import ATTEMPT_COLUMN, DISPATCH_COLUMNS
from duecast.shared.storage.db import Database
from duecast.shared.storage.packed import PACKABLE_TYPES, read_packed
from duecast.shared.storage.schema import check_business_columns, describe
from duecast.shared.storage.source_store import AckCounts, Batch, SourceStatus, SourceStore, StaleAck, guarded
from duecast.shared.storage.units import Cursor

RANGE_KEY = "dc_range"  # each business row handed to a handler carries its span's first id
FRESH_SLACK_S = 1.0  # "checked within period + 1 s" is what freshness counts


class RangeBatch:
    """The business rows of a batch's locked ranges; `ack` writes changes and marks the ranges."""

    def __init__(
        self,
        store: RangeStore,
        cur: Cursor,
        ranges: Batch,
        rows: list[Row],
        skipped: int,
    ) -> None:
        self._store = store
        self._cur = cur
        self._ranges = ranges
        self.rows = rows
        self.skipped = skipped
        self.skipped_locked = ranges.skipped_locked  # ranges another session held past the lock wait
        self.later: list[list[Entry]] = []

    def phases(self) -> list[list[Row]]:
        return [self.rows] if self.rows else []

    def fail(self, failures: Sequence[tuple[Row, object]]) -> None:
        """Nothing to do here: `ack` already leaves the spans of failed rows to the sweeper."""

    def ack(self, acks: Sequence[tuple[Row, Ack]]) -> AckCounts:
        """Write the changed rows, then mark every range whose rows all succeeded as checked.

        A range with a failed row (the handler's, or a value the database refused) is left
        DISPATCHED under a burnt attempt: the sweeper redelivers the whole span. If a range's
        fence no longer matches, StaleAck rolls the whole transaction back, writes included.
        """
        failed: set[int] = set()
        writes = acks
        if len(acks) < len(self.rows):  # acks hold only rows that succeeded, each once
            succeeded = {id(row) for row, _ in acks}
            failed = {row[RANGE_KEY] for row in self.rows if id(row) not in succeeded}
            writes = [(row, ack) for row, ack in acks if row[RANGE_KEY] not in failed]
        failed |= {row[RANGE_KEY] for row in self._store.write_changes(self._cur, writes)}
        seen = Counter(map(itemgetter(RANGE_KEY), self.rows))
        done = [r for r in self._ranges.rows if int(r["lo"]) not in failed]
        self._ranges.fail([(r, None) for r in self._ranges.rows if int(r["lo"]) in failed])
        if not done:
            return AckCounts(0, 0)
        counts = self._ranges.ack([(r, Ack.touch(rows_seen=seen[int(r["lo"])])) for r in done])
        if counts.stale:
            raise StaleAck(counts.stale, "a locked range no longer matched its fence")
        return AckCounts(sum(seen[int(r["lo"])] for r in done), 0)


class RangeStore:
    def __init__(self, db: Database, business: SourceSettings) -> None:
        if business.mode != "ranges":
            raise ValueError(f"source {business.name} is not in range mode")
        self.db = db
        self.business = business
        self.ranges = SourceStore(db, range_source(business))
        self.sql = render_ranges(business, ranges_table(business))
        # Ranges are acked at a fixed rate (see RangeSQL.ack_checked); the rest is row machinery.
        self.ranges.sql = replace(self.ranges.sql, ack_touch=self.sql.ack_checked)
        self.src = self.ranges.src  # what dispatcher and sweeper pace by: counted in ranges
        self.columns: frozenset[str] = frozenset()
        self.column_types: dict[str, str] = {}
        self.id_column = business.id_column
        self._pk = quote(business.id_column)
        self.rows_per_entry = business.range_size

    def verify(self) -> None:
        with self.db.transaction() as cur:
            info = describe(cur, self.business.table)
        check_business_columns(self.business, info)
        self.columns = frozenset(info.columns)
        self.column_types = dict(info.columns)
        self.ranges.verify()

    def claim_due(self, limit: int) -> list[Entry]:
        return self.ranges.claim_due(limit)

    @property
    def skipped_locked(self) -> int:
        """Ranges the last claim passed over because another session held them."""
        return self.ranges.skipped_locked

    def requeue_expired(self, visibility_timeout_s: float, limit: int) -> int:
        return self.ranges.requeue_expired(visibility_timeout_s, limit)

    def reset_dispatched(self) -> int:
        return self.ranges.reset_dispatched()

    def requeue_lost(self, limit: int) -> int:
        return self.ranges.requeue_lost(limit)

    def requeue_interrupted(self, limit: int) -> int:
        return self.ranges.requeue_interrupted(limit)

    def requeue_held(self, entries: Sequence[Entry]) -> int:
        return self.ranges.requeue_held(entries)

    def release_unpushed(self, entries: Sequence[Entry]) -> int:
        return self.ranges.release_unpushed(entries)

    def discover(self, full: bool = False) -> int:
        """Add a range for every span holding a row: from the highest known span, or from 0."""
        with self.db.transaction() as cur:
            cur.execute(self.sql.known_max)
            row = cur.fetchone()
            start = 0 if full or row is None or row[0] is None else int(row[0])
            return int(cur.execute(self.sql.discover, (start,)))

    def status(self) -> SourceStatus:
        base = self.ranges.status()
        slack_us = round((self.business.period_s + FRESH_SLACK_S) * 1_000_000)
        with self.db.transaction() as cur:
            cur.execute(self.sql.freshness, (slack_us,))
            total, fresh = cur.fetchone() or (0, 0)
        share = float(fresh) / float(total) if total else None
        return SourceStatus(base.due, base.in_flight, base.oldest_due_age_s, unit="ranges", fresh_share=share)

    @contextmanager
    def started(self, entries: Sequence[Entry], columns: Sequence[str] = ()) -> Iterator[RangeBatch]:
        """Lock the entries' ranges (fenced, as in row mode), then read their business rows."""
        with self.ranges.started(entries, ["lo", "hi"]) as locked:
            cur = locked.cursor
            rows = self._rows(cur, locked.rows, columns) if locked.rows else []
            yield RangeBatch(self, cur, locked, rows, locked.skipped)

    def _rows(self, cur: Cursor, ranges: list[Row], columns: Sequence[str]) -> list[Row]:
        pk = self.business.id_column
        wanted = list(dict.fromkeys([pk, *columns])) if columns else []
        bounds = [(int(r["lo"]), int(r["hi"])) for r in ranges]
        attempts = {int(r["lo"]): int(r[ATTEMPT_COLUMN]) for r in ranges}
        where = spans(bounds, f"`{pk}`")
        packed = self._packed_rows(cur, wanted, where) if self._packable(wanted) else None
        names = wanted
        values: Sequence[Sequence[Any]]
        if packed is not None:
            values = packed
        else:
            cur.execute(self.sql.rows_in_ranges.format(columns=column_list(wanted), spans=where))
            names = [d[0] for d in cur.description or ()]
            values = cur.fetchall()
        size = self.business.range_size
        rows = []
        for value in values:
            row = dict(zip(names, value, strict=True))
            lo = int(row[pk]) // size * size
            row[RANGE_KEY] = lo
            row[ATTEMPT_COLUMN] = attempts[lo]
            rows.append(row)
        return rows

    def _packable(self, columns: Sequence[str]) -> bool:
        """Whether every column reads back the same through JSON as through PyMySQL: integers and
        (var)char text. Dates, decimals, floats, binary and JSON columns change type (or may), and
        take the plain read; so does a handler that reads every column."""
        return bool(columns) and all(self.column_types.get(c) in PACKABLE_TYPES for c in columns)

    def _packed_rows(self, cur: Cursor, columns: list[str], where: str) -> list[Any] | None:
        stmt = self.sql.rows_in_ranges_packed.format(columns=column_list(columns), spans=where)
        return read_packed(cur, stmt, what=self.business.table)

    def group_key(self, ack: Ack) -> Any:
        """Validate an ack for range mode; rows with equal keys share one write."""
        action = "touch" if ack.action == "default" else ack.action
        for name, _ in ack.values:
            if name not in self.columns or name in DISPATCH_COLUMNS:
                raise ValueError(f"Ack sets {name!r}, which is not a column of {self.business.table}")
        if action == "delete":
            return ("delete",)
        try:
            hash(ack.values)
            return ("touch", ack.values)
        except TypeError:
            return ("touch", ack.values, id(ack))

    def write_changes(self, cur: Cursor, acks: Sequence[tuple[Row, Ack]]) -> list[Row]:
        """Write only rows whose ack changes something (a plain success costs no row write).

        Returns the rows whose values the database refused.
        """
        groups: dict[Any, list[Row]] = defaultdict(list)
        keys: dict[int, Any] = {}  # by identity: most rows share one Ack object
        for row, ack in acks:
            key = keys.get(id(ack))
            if key is None:
                key = keys[id(ack)] = self.group_key(ack)
            if key[0] == "delete" or key[1]:
                groups[key].append(row)
        refused: list[Row] = []
        for key, rows in groups.items():
            _, bad = guarded(cur, rows, partial(self._write, cur, key))
            refused.extend(bad)
        return refused

    def _write(self, cur: Cursor, key: Any, rows: list[Row]) -> int:
        ids = in_list(self._pk, (int(r[self.business.id_column]) for r in rows))
        if key[0] == "delete":
            return int(cur.execute(self.sql.delete_ids.format(ids=ids)))
        names = [n for n, _ in key[1]]
        stmt = self.sql.set_values.format(set=assignments(names), ids=ids)
        return int(cur.execute(stmt, tuple(v for _, v in key[1])))
