"""The freshness reads for shared.monitor.freshness: row mode's stale rows and table size, bounded, and
range mode's first pass. Runs shared.queries.freshness; what the numbers mean is the monitor's.
"""

from __future__ import annotations

from typing import Any

from ..queries.freshness import FreshnessSQL, render_first_pass, render_freshness
from ..settings import SourceSettings
from .db import Database
from .range_store import FRESH_SLACK_S
from .source_store import STATUS_COUNT_CAP

COUNT_CAP = STATUS_COUNT_CAP  # rows counted exactly; beyond it the total is InnoDB's estimate


class RowFreshness:
    """The share for a row-mode source, where each row's due column is its last check.

    Stale rows are counted exactly up to COUNT_CAP through dc_due, and so is the table up to
    COUNT_CAP + 1 rows. A larger table's total is InnoDB's estimate (`exact` is then False): the
    share's error is the estimate's relative error times the stale share, so it stays small while
    few rows are stale. Range mode counts every row exactly at ~1/1,000 the cost.
    """

    def __init__(self, db: Database, src: SourceSettings) -> None:
        self.db = db
        self.src = src
        self.sql: FreshnessSQL = render_freshness(src)
        self._window_us = round((src.period_s + FRESH_SLACK_S) * 1_000_000)

    def read_freshness(self) -> tuple[float | None, bool]:
        """(the share of rows checked within period + 1 s, None for an empty table; exact?)."""
        with self.db.transaction() as cur:
            cur.execute(self.sql.stale_rows, (self._window_us, COUNT_CAP))
            stale = _int(cur.fetchone())
            cur.execute(self.sql.rows_capped, (COUNT_CAP + 1,))
            total = _int(cur.fetchone())
            exact = total <= COUNT_CAP
            if not exact:
                cur.execute(self.sql.rows_estimate, (self.src.table,))
                total = max(total, _int(cur.fetchone()))
        if total == 0:
            return None, True
        return (total - min(stale, total)) / total, exact


def read_first_pass(db: Database, business: SourceSettings) -> tuple[int, int]:
    """(ranges, ranges checked at least once) of a range-mode source: one aggregate over its ranges."""
    with db.transaction() as cur:
        cur.execute(render_first_pass(business))
        row = cur.fetchone()
    return (0, 0) if row is None else (int(row[0] or 0), int(row[1] or 0))


def _int(row: tuple[Any, ...] | None) -> int:
    return 0 if row is None or row[0] is None else int(row[0])
