"""Pure limits on what callers and handlers hand duecast: delays, moments and error text, one
definition each, used by enqueue and by every Ack alike. No I/O; callers pass the time in."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

# How far ahead work may be put, by a delay or a moment: jobs.max_delay_s, 10 years by default. A
# handler's Ack.retry / Ack.touch obeys the same setting as enqueue (the stores check every Ack).
MAX_DELAY_S = 3650 * 86400.0
# The most jobs.max_delay_s may be raised to: what an Ack's constructor checks, before any setting
# is known (the store then applies the setting itself).
DELAY_CEILING_S = 100 * 366 * 86400.0
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

# Characters of error text kept per failure (a task's exception and traceback, a discard's reason):
# 16,000 characters are at most 64,000 bytes of utf8mb4, far under MEDIUMTEXT and any packet limit.
ERROR_TEXT_MAX = 16_000
SHOWN_CHARS = 60  # of a bad value, in an error message


def shown(value: object) -> str:
    """A bad value in an error message: its repr, cut short (it may be huge, or hostile)."""
    text = repr(value)
    return text if len(text) <= SHOWN_CHARS else text[: SHOWN_CHARS - 3] + "..."


CAP = "jobs.max_delay_s"
CEILING = "the most jobs.max_delay_s allows"  # what a constructor names: the setting comes later


def delay_refusal(delay_s: object, max_delay_s: float, cap: str = CAP) -> str | None:
    """Why a delay in seconds is refused, or None: a number (int or float, not a bool), finite,
    from 0 to `max_delay_s` (`cap` names it)."""
    if isinstance(delay_s, bool) or not isinstance(delay_s, int | float):
        return f"must be a number of seconds, not {shown(delay_s)}"
    if isinstance(delay_s, float) and not math.isfinite(delay_s):
        return f"must be a finite number of seconds, not {delay_s!r}"
    if not 0 <= delay_s <= max_delay_s:
        return f"must be 0-{max_delay_s:.0f} s ({cap}), not {shown(delay_s)}"
    return None


def moment_refusal(at: object, now: datetime, max_delay_s: float, cap: str = CAP) -> str | None:
    """Why a moment to run at is refused, or None: a timezone-aware datetime from 1970 to
    `max_delay_s` after `now` (aware too). The past means due now."""
    if not isinstance(at, datetime) or at.tzinfo is None or at.utcoffset() is None:
        return f"must be a timezone-aware datetime, not {shown(at)}"
    try:
        utc = at.astimezone(UTC)
    except OverflowError:
        return f"{at.isoformat()} is out of range"
    latest = now.astimezone(UTC) + timedelta(seconds=max_delay_s)
    if not EPOCH <= utc <= latest:
        return (
            f"must be between 1970 and {max_delay_s:.0f} s (jobs.max_delay_s) from now, not {utc.isoformat()}"
        )
    return None


def storable_text(text: str, limit: int = ERROR_TEXT_MAX) -> str:
    """Text as utf8mb4 can store it, at most `limit` characters: a lone surrogate (a file name
    decoded with surrogateescape) shown as its escape, never an error at the write."""
    if len(text) > limit:  # cut first: 20 MB of text is not worth encoding in full
        text = text[: limit - 20] + "\n...(truncated)"
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = text.encode("utf-8", "backslashreplace").decode("utf-8")  # each at most 10 characters
        return storable_text(text, limit) if len(text) > limit else text
    return text
