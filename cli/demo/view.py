"""The demo's live display and summary. Every number reads the same in both modes: freshness and
staleness come from the freshness measure (rows or ranges), lags never show negative or as years,
and the checks of each of the last seconds show the pace (even over the period once it settles).
"""

from __future__ import annotations

import statistics

from rich.table import Table

from ...shared.monitor.freshness import Freshness
from ...shared.storage.source_store import STATUS_COUNT_CAP
from .. import formats
from .results import Run


def live_table(result: Run, alive: int, started: int, elapsed: float) -> Table:
    """The demo's display, refreshed every second."""
    snap = result.samples[-1].snap
    rates = result.rates()
    c = snap.counters
    table = Table(title=f"duecast demo: {result.users:,} users, re-checked every period", show_header=False)
    table.add_column("what")
    table.add_column("value", justify="right")
    for what, value in (
        ("elapsed", f"{elapsed:.0f}s"),
        ("mode (--mode)", result.mode),
        ("checked within period + 1s", share_text(snap.freshness)),
        ("worst staleness (now - oldest last check)", staleness_text(snap.freshness)),
        ("checks in the last second", f"{rates[-1]:,.0f}" if rates else "-"),
        ("checks per second, last 10 s (target: users/period)", pace_text(rates[-10:], result)),
        ("checks/s (mean so far)", f"{result.mean_rate():,.0f}"),
        ("checks done", f"{c.get('acked', 0):,}"),
        (f"due backlog ({snap.db.unit})", due_text(snap.db.due)),
        (f"in flight ({snap.db.unit})", f"{snap.db.in_flight:,}"),
        ("waiting in Redis (entries)", f"{snap.list_length:,}"),
        ("lag (how long the oldest due has waited)", lag_text(snap.db.oldest_due_age_s)),
        ("redeliveries", f"{c.get('requeued', 0):,}"),
        ("stale entries / acks", f"{c.get('stale_entries', 0):,} / {c.get('stale_acks', 0):,}"),
        ("bad entries", f"{c.get('bad', 0):,}"),
        ("processes alive", f"{alive} of {started}"),
    ):
        table.add_row(what, value)
    return table


def pace_text(rates: list[float], result: Run) -> str:
    """The last seconds' checks, oldest first, and the target they settle at: users/period."""
    if not rates:
        return "-"
    target = result.users / result.period_s
    return " ".join(f"{r / 1000:,.1f}k" for r in rates) + f" (target {target / 1000:,.1f}k)"


def due_text(due: int) -> str:
    return f"{due:,}+" if due >= STATUS_COUNT_CAP else f"{due:,}"


def share_text(fresh: Freshness | None) -> str:
    """The share, or `first pass 62%` while range mode's first pass has not reached every user."""
    return formats.share(fresh)


def staleness_text(fresh: Freshness | None) -> str:
    """Seconds since the least recently checked user was checked; `never` before the first pass
    has reached every one of them (range mode starts with ranges never checked)."""
    return (
        "-" if fresh is None or fresh.worst_staleness_s is None else formats.seconds(fresh.worst_staleness_s)
    )


def lag_text(age_s: float | None) -> str:
    """The oldest due row's wait, 0 when nothing is due yet (a negative age: due in the future)."""
    if age_s is None:
        return "-"
    return "never checked" if age_s >= formats.NEVER_S else f"{max(0.0, age_s):.2f}s"


def summary(result: Run) -> Table:
    # After the first pass only: a reused table starts with rows left stale since the last run, and
    # range mode starts with every range never checked.
    steady = result.steady_samples()
    stale = [
        f.worst_staleness_s for s in steady if (f := s.snap.freshness) and f.worst_staleness_s is not None
    ]
    fresh = [f.fresh_share for s in steady if (f := s.snap.freshness) and f.fresh_share is not None]
    lags = [max(0.0, s.snap.db.oldest_due_age_s or 0.0) for s in steady]
    mean = result.mean_rate()  # over the whole run
    pace = result.window_quantiles(skip_s=2 * result.period_s)  # the first pass over, settled
    table = Table(title="duecast demo summary", show_header=False)
    table.add_column("what")
    table.add_column("value", justify="right")
    for what, value in (
        ("users / worker processes / mode", f"{result.users:,} / {result.workers} / {result.mode}"),
        ("checks done", f"{result.counter('acked'):,}"),
        ("checks/s (mean over the run)", f"{mean:,.0f}"),
        (
            f"1-s windows after {2 * result.period_s:g}s: p1 / median / p99 "
            f"(target {result.users / result.period_s:,.0f})",
            " / ".join(f"{r:,.0f}" for r in pace) if pace else "- (run longer than two periods)",
        ),
        (f"checked within period ({result.period_s:g}s) + 1s, after the first pass", _low_median(fresh)),
        ("worst staleness after the first pass", f"{max(stale):.2f}s" if stale else "-"),
        ("worst lag after the first pass", f"{max(lags, default=0.0):.2f}s"),
        ("redeliveries", f"{result.counter('requeued'):,}"),
        ("stale acks", f"{result.counter('stale_acks'):,}"),
        ("processes exit codes", ", ".join(f"{k}={v}" for k, v in result.exit_codes.items())),
    ):
        table.add_row(what, value)
    return table


def _low_median(shares: list[float]) -> str:
    if not shares:
        return "-"
    return f"lowest {min(shares):.1%}, median {statistics.median(shares):.1%}"
