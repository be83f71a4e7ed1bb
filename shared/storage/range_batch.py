"""A range-mode worker batch: the business rows of started spans, whose outcomes arrive one by one.

A span is finished (its changed rows written and the span acked, one short transaction) once every
row of it has an outcome, or once only stragglers are out (shared.policy.span_settled); a straggler's
outcome then lands on its own, if its span was not claimed again meanwhile. A failed row does not
hold its span back: it is counted, and checked again at the span's next period.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from operator import itemgetter
from typing import Any, Protocol

from ..acks import Ack, Row
from ..entries import Entry
from ..policy import span_settled
from ..states import ATTEMPT_COLUMN
from .leased.keeper import Hold
from .protocol import NO_ACKS, AckCounts
from .row_batch import RowBatch

RANGE_KEY = "dc_range"  # each business row handed to a handler carries its span's first id


@dataclass
class Span:
    """One started span: its range row, the rows read in it, and the outcomes in so far."""

    row: Row  # range_id, lo, hi, dc_attempt
    total: int  # business rows read at the start: what rows_seen records
    seen: set[object] = field(default_factory=set)  # ids with an outcome (the first one counts)
    succeeded: int = 0
    changes: list[tuple[Row, Ack]] = field(default_factory=list)  # successes that write their row
    finished: bool = False
    entry: Entry = field(init=False)  # (range_id, attempt): read once, compared per row

    def __post_init__(self) -> None:
        self.entry = Entry(int(self.row["range_id"]), int(self.row[ATTEMPT_COLUMN]))


# A straggler's success, arriving after its span was finished.
Late = tuple[Span, Row, Ack]


class SpanOwner(Protocol):
    """What a RangeBatch asks of the store that started its spans (RangeStore), named here so that
    the batch does not import its store back."""

    id_column: str

    def changes(self, ack: Ack) -> bool: ...
    def finish_spans(self, spans: list[Span]) -> AckCounts: ...
    def write_late(self, spans: RowBatch, late: list[Late]) -> AckCounts: ...


class RangeBatch:
    """The business rows of a batch's started spans; outcomes in any order and subsets. Counts:
    acked = rows succeeded and applied, stale = successes whose span was no longer this batch's,
    refused = rows whose values the database refused. What a fail() finishes is counted by the
    next ack() or settle()."""

    def __init__(self, store: SpanOwner, spans: RowBatch, rows: list[Row]) -> None:
        self._store = store
        self._spans_batch = spans
        self.rows = rows
        self.skipped = spans.skipped
        self.skipped_locked = spans.skipped_locked  # spans another session held past the lock wait
        self.later: list[list[Entry]] = []
        self.suspects = False  # never interrupted-and-blamed: rows and spans have no such count
        self._started = time.monotonic()
        seen = Counter(map(itemgetter(RANGE_KEY), rows))  # each row's span, an int (RangeStore's read)
        self._spans = {int(r["lo"]): Span(r, seen[int(r["lo"])]) for r in spans.rows}
        self._key = store.id_column
        self._unreported = NO_ACKS  # what fail() finished, for the next ack() or settle() to return
        self._writes: dict[int, tuple[Ack, bool]] = {}  # id(ack) -> (the ack, kept alive; writes a row?)

    @property
    def hold(self) -> Hold | None:
        """The lease keeper's hold on the spans, until close() (the worker asks it before each call)."""
        return self._spans_batch.hold

    @property
    def entries(self) -> list[Entry]:
        """The spans it started, as (range id, attempt): what its worker records as started."""
        return self._spans_batch.entries

    def phases(self) -> list[list[Row]]:
        return [self.rows] if self.rows else []

    def ack(self, acks: Sequence[tuple[Row, Ack]]) -> AckCounts:
        writes, last = self._writes, None
        for _, ack in acks:  # a bad Ack is refused before anything is recorded
            if ack is not last and id(ack) not in writes:  # by identity: most rows share one Ack object
                writes[id(ack)] = (ack, self._store.changes(ack))
            last = ack
        late, strangers = self._record(acks)
        counts = self._finish_complete() + self._store.write_late(self._spans_batch, late)
        return self._reported() + counts + AckCounts(0, strangers)

    def fail(self, failures: Sequence[tuple[Row, object]]) -> None:
        """Failed rows count as checked for their span; nothing of theirs is written."""
        self._record((row, None) for row, _ in failures)
        self._unreported += self._finish_complete()

    def settle(self) -> AckCounts:
        """Finish the spans whose only rows left out are stragglers (shared.policy.span_settled)."""
        elapsed = time.monotonic() - self._started
        due = [
            s
            for s in self._spans.values()
            if not s.finished and span_settled(s.total, s.total - len(s.seen), elapsed)
        ]
        return self._reported() + self._finish(due)

    def close(self) -> None:
        """Stop keeping the spans' leases; a span not finished by now is requeued once its lease
        runs out (interrupted), and its rows are checked again."""
        self._spans_batch.close()

    def _record(self, outcomes: Iterable[tuple[Row, Ack | None]]) -> tuple[list[Late], int]:
        """Note each outcome on its span (the first one per row counts). Returns the successes
        whose span is already finished, and how many acked rows are not of this batch at all."""
        late: list[Late] = []
        strangers = 0
        spans, key_column, writes = self._spans, self._key, self._writes
        lo: Any = None
        span: Span | None = None
        attempt = -1
        seen: set[object] = set()
        last: Ack | None = None
        writes_row = False
        for row, ack in outcomes:
            if row[RANGE_KEY] != lo:  # a span's rows mostly come together: its look-ups once
                lo = row[RANGE_KEY]
                span = spans.get(lo)
                if span is not None:
                    attempt, seen = span.entry.attempt, span.seen
            if span is None or row[ATTEMPT_COLUMN] != attempt:
                strangers += ack is not None
                continue
            key = row[key_column]
            if key in seen:
                continue
            seen.add(key)
            if ack is None:
                continue
            if span.finished:
                late.append((span, row, ack))
                continue
            span.succeeded += 1
            if ack is not last:  # most rows share one Ack object: its look-up once per run of it
                last, writes_row = ack, writes[id(ack)][1]
            if writes_row:
                span.changes.append((row, ack))
        return late, strangers

    def _finish_complete(self) -> AckCounts:
        """Finish the spans every row of which has an outcome now."""
        complete = [s for s in self._spans.values() if not s.finished and len(s.seen) >= s.total]
        return self._finish(complete)

    def _finish(self, spans: list[Span]) -> AckCounts:
        if not spans:
            return NO_ACKS
        for span in spans:
            span.finished = True  # from now on its rows' outcomes are stragglers'
        self._spans_batch.finishing(s.row for s in spans)
        return self._spans_batch.retrying(lambda: self._store.finish_spans(spans))

    def _reported(self) -> AckCounts:
        counts, self._unreported = self._unreported, NO_ACKS
        return counts
