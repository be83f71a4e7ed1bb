"""How values read in `duecast status`, `duecast web` and the other commands: counts, durations,
shares and rates; and user-controlled text made safe for a terminal (`shown`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping

from rich.text import Text

from ..shared.monitor.freshness import Freshness, failed_share
from ..shared.storage.source_store import STATUS_COUNT_CAP

NEVER_S = 10 * 365 * 86400.0  # older than this is a row never checked (range discovery's start date)

# What a terminal acts on instead of showing: C0 controls (ESC starts every escape sequence), DEL,
# C1 controls (CSI, OSC), lone surrogates (an encode error), and the invisible marks that reorder
# or hide text (bidi overrides and isolates, zero-width characters, line and paragraph separators).
_UNSAFE = "\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff\ud800-\udfff"
_UNSAFE_IN_LINE = re.compile(f"[\t\n{_UNSAFE}]")
_UNSAFE_IN_LINES = re.compile(f"[{_UNSAFE}]")


def shown(value: object, *, lines: bool = False) -> Text:
    """User-controlled text (task, queue, topic, group and worker names, keys, payloads, errors) as
    every command prints it: a rich Text, so `[link=...]` is data and never markup, with each
    character a terminal would act on written as its escape (`\\x1b`), so an enqueuer's text can
    neither retitle nor recolour an operator's terminal. `lines`: keep newlines and tabs (a
    traceback); otherwise the text stays on its line. `plain(...)` is the same as a str."""
    return Text(plain(value, lines=lines))


def plain(value: object, *, lines: bool = False) -> str:
    """`shown`'s text as a str, for print() (which renders no markup)."""
    pattern = _UNSAFE_IN_LINES if lines else _UNSAFE_IN_LINE
    return pattern.sub(_escape, str(value))


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


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
