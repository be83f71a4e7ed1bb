"""Range mode's per-row path without a database: the rows a handler gets from a read (with_spans), and
how a RangeBatch records their outcomes (its span and attempt looked up once per run of a span's rows).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, cast

import pytest

from duecast.shared.acks import Ack, Row
from duecast.shared.entries import Entry
from duecast.shared.storage.protocol import NO_ACKS, AckCounts
from duecast.shared.storage.range_batch import RANGE_KEY, Late, RangeBatch, Span
from duecast.shared.storage.range_store import row_maker, with_spans
from duecast.shared.storage.row_batch import RowBatch

SIZE = 10
ATTEMPTS = {0: 4, 10: 7, 20: 9}  # each span's attempt, by its first id


def test_each_row_gets_its_columns_its_span_and_its_spans_attempt() -> None:
    values = [[1, "a"], [9, "b"], [10, "c"], [25, "d"]]
    rows = with_spans(values, ["user_id", "status"], 0, SIZE, ATTEMPTS)
    assert rows == [
        {"user_id": 1, "status": "a", "dc_range": 0, "dc_attempt": 4},
        {"user_id": 9, "status": "b", "dc_range": 0, "dc_attempt": 4},
        {"user_id": 10, "status": "c", "dc_range": 10, "dc_attempt": 7},
        {"user_id": 25, "status": "d", "dc_range": 20, "dc_attempt": 9},
    ]


def test_rows_out_of_id_order_still_get_their_own_span() -> None:
    """The span is looked up again whenever a row falls outside the last one, whatever the order."""
    values = [(12, 1), (3, 1), (27, 1), (11, 1), (0, 1)]
    rows = with_spans(values, ["status", "user_id"][::-1], 0, SIZE, ATTEMPTS)
    assert [(r["user_id"], r[RANGE_KEY], r["dc_attempt"]) for r in rows] == [
        (12, 10, 7),
        (3, 0, 4),
        (27, 20, 9),
        (11, 10, 7),
        (0, 0, 4),
    ]


def test_the_key_column_may_be_anywhere_and_rows_are_new_dicts() -> None:
    values = [("x", 21)]
    rows = with_spans(values, ["name", "user_id"], 1, SIZE, ATTEMPTS)
    assert rows == [{"name": "x", "user_id": 21, "dc_range": 20, "dc_attempt": 9}]
    assert values == [("x", 21)]  # the read's values are left as they were


def test_any_column_name_is_a_key_as_it_is_and_the_spans_values_win() -> None:
    """The dict is made by generated code (row_maker): a name is only ever a str key, whatever it holds."""
    odd = ["user_id", "it's", 'a "b" \\ {c}', "x'); import os; ('", "dc_attempt", "user_id"]
    rows = with_spans([[3, 1, 2, 3, 99, 4]], odd, 0, SIZE, ATTEMPTS)
    assert rows == [
        {"user_id": 4, "it's": 1, 'a "b" \\ {c}': 2, "x'); import os; ('": 3, "dc_attempt": 4, "dc_range": 0}
    ]  # a later name wins, as in dict(zip()); the span's attempt wins over a column of that name
    assert row_maker(tuple(odd)) is row_maker(tuple(odd))  # made once per column list


def test_a_read_whose_rows_do_not_match_its_columns_is_refused() -> None:
    with pytest.raises(ValueError, match="2 values for 3 columns"):
        with_spans([[1, 2]], ["user_id", "status", "more"], 0, SIZE, ATTEMPTS)
    assert with_spans([], ["user_id"], 0, SIZE, ATTEMPTS) == []


class _Spans:
    """What a RangeBatch asks of its started spans (a RowBatch): rows, no hold, units run at once."""

    def __init__(self, spans: list[Row]) -> None:
        self.rows = spans
        self.skipped = self.skipped_locked = 0
        self.hold = None
        self.entries: list[Entry] = []

    def finishing(self, rows: Iterable[Row]) -> None:
        pass

    def retrying(self, unit: Callable[[], Any]) -> Any:
        return unit()

    def close(self) -> None:
        pass


class _Owner:
    """The store side: records what each finish and late write was given."""

    id_column = "user_id"

    def __init__(self) -> None:
        self.finished: list[tuple[int, int, int]] = []  # (span's first id, rows succeeded, changes)
        self.late: list[Late] = []

    def changes(self, ack: Ack) -> bool:
        return bool(ack.values)

    def finish_spans(self, spans: list[Span]) -> AckCounts:
        self.finished += [(int(s.row["lo"]), s.succeeded, len(s.changes)) for s in spans]
        return AckCounts(sum(s.succeeded for s in spans), 0)

    def write_late(self, spans: RowBatch, late: list[Late]) -> AckCounts:
        self.late += late
        return AckCounts(len(late), 0) if late else NO_ACKS


def _batch() -> tuple[RangeBatch, _Owner]:
    span_rows = [
        {"range_id": lo // SIZE + 1, "lo": lo, "hi": lo + SIZE, "dc_attempt": a} for lo, a in ATTEMPTS.items()
    ]
    values = [[i, 1] for i in (1, 2, 11, 12, 21)]
    rows = with_spans(values, ["user_id", "status"], 0, SIZE, ATTEMPTS)
    owner = _Owner()
    return RangeBatch(owner, cast(RowBatch, _Spans(span_rows)), rows), owner


def test_outcomes_of_interleaved_spans_each_count_for_their_own_span() -> None:
    batch, owner = _batch()
    r1, r2, r11, r12, r21 = batch.rows
    touch = Ack.touch(status=2)
    # Spans interleaved, a row twice (the first outcome counts), and a row of span 10 under an
    # attempt that is not this batch's (another batch's row: a stranger, not counted for the span).
    stranger = {**r12, "dc_attempt": 1}
    counts = batch.ack(
        [(r1, Ack.default()), (r11, touch), (r2, touch), (r11, Ack.default()), (stranger, touch)]
    )
    assert counts == AckCounts(2, 1)  # span 0 finished (2 rows); the stranger counted as stale
    assert owner.finished == [(0, 2, 1)]
    counts = batch.ack([(r21, Ack.default()), (r12, Ack.default())])
    assert owner.finished == [(0, 2, 1), (10, 2, 1), (20, 1, 0)]
    assert counts == AckCounts(3, 0)


def test_a_failed_row_completes_its_span_and_a_later_success_of_it_is_not_counted_again() -> None:
    batch, owner = _batch()
    r1, r2, *_ = batch.rows
    batch.fail([(r1, ValueError("x"))])
    assert batch.ack([(r1, Ack.default()), (r2, Ack.default())]) == AckCounts(1, 0)
    assert owner.finished == [(0, 1, 0)]
    assert owner.late == []
