"""The SQL of row-mode freshness: how many rows of a re-scan source were not checked within their period;
and of range mode's first pass: how many of its ranges have been checked at least once.

Every row-mode statement reads a bounded number of index entries (a LIMIT inside a derived table), so
its cost does not grow with the table. Range mode's freshness is one aggregate over its ranges
(shared.queries.source), and so is its first pass (a range per range_size ids: ~1/1,000 of the rows).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..identifiers import quote
from ..settings import SourceSettings
from ..states import DUE_INDEX, STATE_COLUMN, State
from .ranges import NEVER_CHECKED, ranges_table

IDLE, DISPATCHED, RUNNING = int(State.IDLE), int(State.DISPATCHED), int(State.RUNNING)


@dataclass(frozen=True)
class FreshnessSQL:
    stale_rows: str
    rows_capped: str
    rows_estimate: str


def render_freshness(src: SourceSettings) -> FreshnessSQL:
    t, due, st, ix = quote(src.table), quote(src.due_column), quote(STATE_COLUMN), quote(DUE_INDEX)
    return FreshnessSQL(
        # Rows last checked before NOW(6) - (period + slack), at most %s of them. A re-scan's due
        # column is its last check (an ack touches it), so these are the dc_due ranges
        # (0, -inf..cutoff), (1, -inf..cutoff) and (2, -inf..cutoff): the overdue rows plus at
        # most the rows in flight (claimed or started).
        stale_rows=(
            f"SELECT COUNT(*) FROM (SELECT 1 FROM {t} FORCE INDEX ({ix}) "
            f"WHERE {st} IN ({IDLE}, {DISPATCHED}, {RUNNING}) AND {due} < NOW(6) - INTERVAL %s MICROSECOND "
            "LIMIT %s) AS stale"
        ),
        # The table's rows, counted exactly up to %s through dc_due (a covering index read).
        rows_capped=f"SELECT COUNT(*) FROM (SELECT 1 FROM {t} FORCE INDEX ({ix}) LIMIT %s) AS counted",
        # Past that cap: InnoDB's estimate of the table's rows (no scan; refreshed by its statistics).
        rows_estimate=(
            "SELECT TABLE_ROWS FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() "
            "AND TABLE_NAME = %s"
        ),
    )


def render_first_pass(src: SourceSettings) -> str:
    """(ranges, ranges checked at least once) of a range-mode source: a discovered range keeps
    NEVER_CHECKED until a worker first acks it, so the two differ until the first pass is over."""
    r = quote(ranges_table(src))
    return f"SELECT COUNT(*), COALESCE(SUM(`checked_at` > '{NEVER_CHECKED}'), 0) FROM {r}"
