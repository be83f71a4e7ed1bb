"""How numbers read in `duecast status` and `duecast web`: counts, durations, shares and rates."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

from ..shared.monitor.freshness import Freshness, failed_share
from ..shared.storage.source_store import STATUS_COUNT_CAP

NEVER_S = 10 * 365 * 86400.0  # older than this is a row never checked (range discovery's start date)


def count(n: int) -> str:
    """A count; a due backlog stops counting at STATUS_COUNT_CAP, shown as `100,000+`."""
    return f"{n:,}+" if n >= STATUS_COUNT_CAP else f"{n:,}"


def duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    s = max(0.0, seconds)
    if s >= NEVER_S:
        return "never"
    if s < 60:
        return f"{s:.1f}s"
    if s < 3600:
        return f"{int(s // 60)}m {int(s % 60):02d}s"
    if s < 86400:
        return f"{int(s // 3600)}h {int(s % 3600 // 60):02d}m"
    return f"{s / 86400:.1f}d"


def axis_seconds(value: float) -> str:
    """A chart axis label for seconds: like duration, but a number at any size (never `never`)."""
    s = max(0.0, value)
    return duration(s) if s < NEVER_S else f"{s / 86400:,.0f}d"


def seconds(value: float | None) -> str:
    """Seconds as `duecast status` prints them: exact and easy to parse (`3601.5s`)."""
    if value is None:
        return "-"
    return "never" if value >= NEVER_S else f"{max(0.0, value):.1f}s"


def rate(per_s: float | None) -> str:
    if per_s is None:
        return "-"
    return f"{per_s:,.0f}/s" if per_s >= 10 else f"{per_s:.1f}/s"


def share(fresh: Freshness | None) -> str:
    """The share of rows checked within period + 1 s; `≈` when its total is InnoDB's estimate; while
    range mode's first pass has not reached every range, how far it has got instead (`first pass 62%`):
    a share of the rows checked so far would read 100% with a third of the table never checked."""
    if fresh is not None and fresh.first_pass is not None:
        return f"first pass {math.floor(fresh.first_pass * 100)}%"  # rounded down: never 100% before the end
    if fresh is None or fresh.fresh_share is None:
        return "-"
    return f"{'' if fresh.exact else '≈'}{fresh.fresh_share:.1%}"


def failing(fresh: Freshness | None, rates: Mapping[str, float], counters: Mapping[str, float]) -> str:
    """A re-scan source's share of failed checks: between the last two readings (`rates`), or, from
    one reading, since the counters began. `-` for other sources, or before any check."""
    if fresh is None:
        return "-"
    share = failed_share(rates) if rates else failed_share(counters)
    return "-" if share is None else f"{share:.1%}"


def estimated(freshness: Iterable[Freshness | None]) -> bool:
    """Whether any of these shares stands on InnoDB's row estimate (the `≈` note is shown only then)."""
    return any(f is not None and f.fresh_share is not None and not f.exact for f in freshness)


def staleness(fresh: Freshness | None) -> str:
    return "-" if fresh is None else seconds(fresh.worst_staleness_s)
