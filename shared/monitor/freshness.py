"""Freshness of re-scan sources: the worst staleness (NOW() - the oldest last check), the share of
rows checked within period + 1 s, and in range mode how far the first pass has got. Read-only, with
bounded queries (shared.storage.freshness runs them); `duecast status`, the dashboard and the
dispatcher's gauges show it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ..settings import SourceSettings
from ..storage.freshness import RowFreshness, read_first_pass
from ..storage.range_store import RangeStore
from ..storage.source_store import SourceStatus, SourceStore, Store


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


def first_pass(ranges: int, checked: int) -> float | None:
    """The share of a range-mode source's ranges checked at least once; None when all have been."""
    return None if checked >= ranges else checked / ranges


def counting_unreached(share: float | None, reached: float | None) -> float | None:
    """Range mode's share of fresh rows with the ranges the first pass has not reached as stale.

    The ranges' row counts are known only once checked (rows_seen), so the unreached ones are taken to
    hold as many rows per range as the checked ones: fresh / (seen * all / checked) = share * reached.
    """
    if share is None or reached is None:
        return share
    return share * reached


def failed_share(counts: Mapping[str, float]) -> float | None:
    """The share of checks that failed (a call past its time limit counts as failed) in `counts`,
    the Redis counters (`acked`, `failed`) or their deltas between two readings; None: no checks.

    Shown beside the fresh share, which counts failed checks as checks: a row's due column is both
    its last check and what schedules the next, so a failed check must set it too (or the row would
    be due again at once, hammering whatever makes it fail), and a row records nothing else to
    tell a failed check from a good one (docs/observability.md, "Freshness")."""
    failed, acked = counts.get("failed", 0), counts.get("acked", 0)
    return None if failed + acked <= 0 else failed / (failed + acked)


def measure(store: Store, status: SourceStatus) -> Freshness | None:
    """Freshness of `store`'s source given its `status()`; None when it is not a re-scan source."""
    reached: float | None = None
    if isinstance(store, RangeStore):
        period_s, exact = store.business.period_s, True
        reached = first_pass(*read_first_pass(store.db, store.business))
        share = counting_unreached(status.fresh_share, reached)
    elif isinstance(store, SourceStore) and is_rescan(store.src):
        period_s = store.src.period_s
        share, exact = RowFreshness(store.db, store.src).read_freshness()
    else:
        return None
    # The oldest due age is measured from "due" = last check + period.
    age = status.oldest_due_age_s
    worst = None if age is None else max(0.0, age + period_s)
    return Freshness(worst, share, exact, reached)
