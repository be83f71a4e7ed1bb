"""Range mode's store: dispatch state per span of ids, business rows read by PK range, written on change.

Claims, starts, leases, fenced acks and requeues of spans are the row-mode SourceStore on the ranges
table; this class adds what happens to the business rows of a started span (RangeBatch tracks their
outcomes). It runs all of range mode's SQL (text in shared.queries.source).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from functools import lru_cache, partial
from typing import Any, cast

from ..acks import Ack, Row, check_times
from ..entries import Entry
from ..identifiers import quote
from ..limits import MAX_DELAY_S
from ..queries.ranges import range_source, ranges_table, render_ranges
from ..queries.source import assignments, column_list, in_list, spans
from ..settings import SourceSettings
from ..states import ATTEMPT_COLUMN
from .db import Database
from .packed import PACKABLE_TYPES, read_packed
from .protocol import AckCounts, SourceStatus, StartUnknown
from .range_batch import RANGE_KEY, Late, RangeBatch, Span
from .row_batch import RowBatch, check_settable, guarded, row_action_refusal
from .schema import SchemaError, check_business_columns, described
from .source_store import SourceStore
from .units import Cursor

__all__ = ["FRESH_SLACK_S", "RANGE_KEY", "RangeBatch", "RangeStore"]

FRESH_SLACK_S = 1.0  # "checked within period + 1 s" is what freshness counts


class RangeStore:
    def __init__(self, db: Database, business: SourceSettings, max_delay_s: float = MAX_DELAY_S) -> None:
        if business.mode != "ranges":
            raise ValueError(f"source {business.name} is not in range mode")
        self.db = db
        self.business = business
        self.ranges = SourceStore(db, range_source(business), max_delay_s)
        self.sql = render_ranges(business, ranges_table(business))
        # Ranges are acked at a fixed rate (see RangeSQL.ack_checked); the rest is row machinery.
        self.ranges.sql = replace(self.ranges.sql, ack_touch=self.sql.ack_checked)
        self.src = self.ranges.src  # what dispatcher and sweeper pace by: counted in ranges
        self.columns: frozenset[str] = frozenset()
        self.column_types: dict[str, str] = {}
        self.id_column = business.id_column
        self._pk = quote(business.id_column)
        self.rows_per_entry = business.range_size
        self.claim_weight = 1  # a range counts as one in claim_batch and high_water

    def verify(self) -> None:
        with self.db.transaction() as cur:
            info = described(
                cur, self.business.table, f"source {self.business.name}: table {self.business.table}"
            )
        check_business_columns(self.business, info)
        self.columns = frozenset(info.columns)
        self.column_types = dict(info.columns)
        table = self.ranges.src.table  # duecast's own: only `duecast migrate` makes it
        what = f"source {self.business.name}: its ranges table {table}"
        with self.db.transaction() as cur:
            ranges = described(cur, table, what)
        if not ranges.columns:
            raise SchemaError(f"{what} is missing; run `duecast migrate`")
        self.ranges.verify()

    def claim_due(self, limit: int) -> list[Entry]:
        return self.ranges.claim_due(limit)

    @property
    def skipped_locked(self) -> int:
        """Ranges the last claim passed over because another session held them."""
        return self.ranges.skipped_locked

    @property
    def skipped_ids(self) -> frozenset[int] | None:
        """...and which (None: the claim was full, so it did not look)."""
        return self.ranges.skipped_ids

    def requeue_expired(self, visibility_timeout_s: float, limit: int) -> int:
        return self.ranges.requeue_expired(visibility_timeout_s, limit)

    def close(self) -> None:
        """Close this store's session and end its spans' lease keeper (the span store's, on this session)."""
        self.ranges.close()

    def reset_dispatched(self) -> int:
        return self.ranges.reset_dispatched()

    def requeue_lost(self, limit: int, dispatched_s: float = 0.0) -> int:
        return self.ranges.requeue_lost(limit, dispatched_s)

    def requeue_interrupted(self, limit: int) -> int:
        return self.ranges.requeue_interrupted(limit)

    def requeue_held(self, entries: Sequence[Entry]) -> int:
        return self.ranges.requeue_held(entries)

    def release_unpushed(self, entries: Sequence[Entry]) -> int:
        return self.ranges.release_unpushed(entries)

    def requeue_started(self, entries: Sequence[Entry]) -> int:
        """Spans an exited worker had started -> due now (SourceStore.requeue_started)."""
        return self.ranges.requeue_started(entries)

    @property
    def returning(self) -> int:
        """The last claim's first ranges that came back (SourceStore.claim_due)."""
        return self.ranges.returning

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
        """`start`, then `close` when the block ends, however it ends."""
        batch = self.start(entries, columns)
        try:
            yield batch
        finally:
            batch.close()

    def start(self, entries: Sequence[Entry], columns: Sequence[str] = ()) -> RangeBatch:
        """Start the entries' spans as row mode starts rows (RUNNING, committed, leased until the
        batch closes), then read their business rows with a plain read: no lock on either while
        the checks run. Spans that hold no row are finished at once."""
        return self._read_started(lambda: self.ranges.start(entries, ["lo", "hi"]), columns)

    def _read_started(self, starting: Callable[[], RowBatch], columns: Sequence[str]) -> RangeBatch:
        """The batch of the spans `starting()` started, their rows read; a start of spans whose COMMIT
        got no answer (StartUnknown) is settled the same way, its rows read once it is."""
        try:
            spans = starting()
        except StartUnknown as exc:
            resume = exc.resume
            raise StartUnknown(exc, lambda: self._read_started(resume, columns)) from exc
        try:
            rows = self._read(spans.rows, columns) if spans.rows else []
        except BaseException:
            spans.give_back()  # nothing ran: due again now, not after a lease
            raise
        batch = RangeBatch(self, spans, rows)
        try:
            batch.settle()
        except BaseException:
            batch.close()  # the caller gets no batch to close: its spans' leases run out instead
            raise
        return batch

    def _read(self, ranges: list[Row], columns: Sequence[str]) -> list[Row]:
        with self.db.transaction() as cur:
            return self._rows(cur, ranges, columns)

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
        return with_spans(values, names, names.index(pk), self.business.range_size, attempts)

    def _packable(self, columns: Sequence[str]) -> bool:
        """Whether every column reads back the same through JSON as through PyMySQL: integers and
        (var)char text. Dates, decimals, floats, binary and JSON columns change type (or may), and
        take the plain read; so does a handler that reads every column."""
        return bool(columns) and all(self.column_types.get(c) in PACKABLE_TYPES for c in columns)

    def _packed_rows(self, cur: Cursor, columns: list[str], where: str) -> list[Any] | None:
        stmt = self.sql.rows_in_ranges_packed.format(columns=column_list(columns), spans=where)
        return read_packed(cur, stmt, what=self.business.table)

    def finish_spans(self, spans: list[Span]) -> AckCounts:
        """One transaction: lock the spans still RUNNING under their attempt, write the changed
        rows of those that are (a refused value fails that row alone), and ack them (fixed rate,
        rows_seen). A span no longer this batch's writes nothing: its successes count as stale."""
        with self.db.transaction() as cur:
            ours = self.ranges.lock_running(cur, [s.row for s in spans])
            mine = [s for s in spans if s.entry.id in ours]
            refused = self.write_changes(cur, [change for s in mine for change in s.changes])
            if mine:
                checked = [(s.row, Ack.touch(rows_seen=s.total)) for s in mine]
                self.ranges.finish(cur, self.ranges.ack_groups(checked))
        stale = sum(s.succeeded for s in spans if s.entry.id not in ours)
        return AckCounts(sum(s.succeeded for s in mine) - len(refused), stale, len(refused))

    def write_late(self, spans: RowBatch, late: list[Late]) -> AckCounts:
        """Stragglers' successes, after their span was finished: their changes are written only
        while the span is still at the attempt they ran under (no claim since), else dropped and
        counted stale. One transaction, retried as a unit; none when nothing changes."""
        changes = [(span, row, ack) for span, row, ack in late if self.changes(ack)]
        plain = len(late) - len(changes)
        if not changes:
            return AckCounts(plain, 0)

        def once() -> AckCounts:
            with self.db.transaction() as cur:
                ours = self.ranges.lock_attempt(cur, list({s.entry for s, _, _ in changes}))
                writes = [(row, ack) for span, row, ack in changes if span.entry.id in ours]
                refused = self.write_changes(cur, writes)
            return AckCounts(plain + len(writes) - len(refused), len(changes) - len(writes), len(refused))

        return spans.retrying(once)

    def changes(self, ack: Ack) -> bool:
        """Whether a success with this Ack writes its row (raises ValueError for a bad Ack)."""
        key = self.group_key(ack)
        return bool(key[0] == "delete" or key[1])

    def group_key(self, ack: Ack) -> Any:
        """Validate an ack for range mode (as SourceStore.group_key); rows with equal keys share one write."""
        action = "touch" if ack.action == "default" else ack.action
        if action not in ("touch", "delete"):
            raise ValueError(row_action_refusal(ack, self.business.name))
        check_times(ack, self.ranges.max_delay_s)
        for name, _ in ack.values:
            check_settable(name, self.business, self.columns)
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
            if key[0] == "delete" or key[1]:  # a plain success costs no row write
                groups[key].append(row)
        refused: list[Row] = []
        for key, rows in groups.items():
            _, bad = guarded(cur, rows, partial(self._write, cur, key), self.business)
            refused.extend(bad)
        return refused

    def _write(self, cur: Cursor, key: Any, rows: list[Row]) -> int:
        ids = in_list(self._pk, (int(r[self.business.id_column]) for r in rows))
        if key[0] == "delete":
            return int(cur.execute(self.sql.delete_ids.format(ids=ids), (len(rows),)))
        names = [n for n, _ in key[1]]
        stmt = self.sql.set_values.format(set=assignments(names), ids=ids)
        return int(cur.execute(stmt, tuple(v for _, v in key[1])))


def with_spans(
    values: Sequence[Sequence[Any]], names: Sequence[str], key: int, size: int, attempts: dict[int, int]
) -> list[Row]:
    """Each read row as the dict a handler gets: its columns, its span's first id and its span's
    attempt. The hot path of a range-mode worker (a dict per checked row): the span's values are
    looked up once per span, not per row (rows come in id order, so a span's rows are adjacent;
    any order stays right), and each dict is made by a dict display (row_maker)."""
    if values and len(values[0]) != len(names):  # every row of one read has the same columns
        raise ValueError(f"a read gave {len(values[0])} values for {len(names)} columns")
    make = row_maker(tuple(names))
    rows: list[Row] = []
    append = rows.append
    lo, hi, attempt = 0, -1, 0
    for value in values:
        pk = value[key]
        if not lo <= pk < hi:  # the first row of a span
            lo = int(pk) // size * size
            hi, attempt = lo + size, attempts[lo]
        append(make(value, lo, attempt))
    return rows


@lru_cache(maxsize=64)
def row_maker(names: tuple[str, ...]) -> Callable[[Sequence[Any], int, int], Row]:
    """`make(values, lo, attempt)`: the dict of a row's values under `names`, plus its span's first
    id and attempt (a later name wins, as in a dict built from pairs). A dict display of constant
    keys, as collections.namedtuple makes its class: about 2.5x faster than dict(zip()) of the
    values and the span's two (bench/range_path.py). The source holds only repr() of each name
    (a str literal, whatever the name) and indexes, and is evaluated with no builtins."""
    items = "".join(f"{name!r}: v[{i}], " for i, name in enumerate(names))
    source = f"lambda v, lo, attempt: {{{items}{RANGE_KEY!r}: lo, {ATTEMPT_COLUMN!r}: attempt}}"
    return cast(Callable[[Sequence[Any], int, int], Row], eval(source, {"__builtins__": {}}))  # noqa: S307
