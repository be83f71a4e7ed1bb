"""Freshness of re-scan sources: the worst staleness (NOW() - the oldest last check), the share of
rows checked within period + 1 s, and in range mode how far the first pass has got. Read-only, with
bounded queries; `duecast status`, the dashboard and the dispatcher's gauges show it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..queries.freshness import FreshnessSQL, render_first_pass, render_freshness
from ..settings import SourceSettings
from ..storage.db import Database
from ..storage.range_store import FRESH_SLACK_S, RangeStore
from ..storage.source_store import STATUS_COUNT_CAP, SourceStatus, SourceStore, Store

COUNT_CAP = STATUS_COUNT_CAP  # rows counted exactly; beyond it the total is InnoDB's estimate


@dataclass(frozen=True)
class Freshness:
    worst_staleness_s: float | None  # None: the table is empty
    fresh_share: float | None  # 0..1; None: no rows (or none seen yet, in range mode)
    exact: bool = True  # False: the share's total is InnoDB's row estimate (row mode, large table)
    # Range mode, until every range has been checked once: the share of ranges checked so far. The
    # ranges not reached yet count as stale in fresh_share (it cannot read 100% before then).
    first_pass: float | None = None


def is_rescan(src: SourceSettings) -> bool:
    """Sources whose rows are re-checked every period (job queues and one-off sources are not)."""
    return src.period_s > 0 and src.on_success == "touch"


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

    def share(self) -> tuple[float | None, bool]:
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


def first_pass(db: Database, business: SourceSettings) -> float | None:
    """The share of a range-mode source's ranges checked at least once; None when all have been."""
    with db.transaction() as cur:
        cur.execute(render_first_pass(business))
        row = cur.fetchone()
    total, checked = (0, 0) if row is None else (int(row[0] or 0), int(row[1] or 0))
    return None if checked >= total else checked / total


def counting_unreached(share: float | None, reached: float | None) -> float | None:
    """Range mode's share of fresh rows with the ranges the first pass has not reached as stale.

    The ranges' row counts are known only once checked (rows_seen), so the unreached ones are taken to
    hold as many rows per range as the checked ones: fresh / (seen * all / checked) = share * reached.
    """
    if share is None or reached is None:
        return share
    return share * reached


def measure(store: Store, status: SourceStatus) -> Freshness | None:
    """Freshness of `store`'s source given its `status()`; None when it is not a re-scan source."""
    reached: float | None = None
    if isinstance(store, RangeStore):
        period_s, exact = store.business.period_s, True
        reached = first_pass(store.db, store.business)
        share = counting_unreached(status.fresh_share, reached)
    elif isinstance(store, SourceStore) and is_rescan(store.src):
        period_s = store.src.period_s
        share, exact = RowFreshness(store.db, store.src).share()
    else:
        return None
    # The oldest due age is measured from "due" = last check + period.
    age = status.oldest_due_age_s
    worst = None if age is None else max(0.0, age + period_s)
    return Freshness(worst, share, exact, reached)


def _int(row: tuple[Any, ...] | None) -> int:
    return 0 if row is None or row[0] is None else int(row[0])
