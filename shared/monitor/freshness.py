"""Freshness of re-scan sources: the worst staleness (NOW() - the oldest last check) and the share of
rows checked within period + 1 s. Read-only, with bounded queries (shared.storage.freshness runs them);
`duecast status`, the dashboard and the dispatcher's gauges show it.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..settings import SourceSettings
from ..storage.freshness import RowFreshness
from ..storage.range_store import RangeStore
from ..storage.source_store import SourceStatus, SourceStore, Store


@dataclass(frozen=True)
class Freshness:
    worst_staleness_s: float | None  # None: the table is empty
    fresh_share: float | None  # 0..1; None: no rows (or none seen yet, in range mode)
    exact: bool = True  # False: the share's total is InnoDB's row estimate (row mode, large table)


def is_rescan(src: SourceSettings) -> bool:
    """Sources whose rows are re-checked every period (job queues and one-off sources are not)."""
    return src.period_s > 0 and src.on_success == "touch"


def measure(store: Store, status: SourceStatus) -> Freshness | None:
    """Freshness of `store`'s source given its `status()`; None when it is not a re-scan source."""
    if isinstance(store, RangeStore):
        period_s, share, exact = store.business.period_s, status.fresh_share, True
    elif isinstance(store, SourceStore) and is_rescan(store.src):
        period_s = store.src.period_s
        share, exact = RowFreshness(store.db, store.src).read_freshness()
    else:
        return None
    # The oldest due age is measured from "due" = last check + period.
    age = status.oldest_due_age_s
    worst = None if age is None else max(0.0, age + period_s)
    return Freshness(worst, share, exact)

