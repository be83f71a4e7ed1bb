"""`duecast status`'s limits: each limited source's, queue's and task's (`task:<name>`) rate, burst
and max_running, the tokens its bucket holds now, and, while its demand exceeds its rate, the period
the limit allows."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from rich.table import Table
from rich.text import Text

from ..shared.storage.limits import LimitState
from . import formats


def limits_table(states: list[LimitState]) -> Table | None:
    if not states:
        return None
    table = Table(title="limits")
    for col in ("source", "rate limit", "burst", "tokens now", "max running", "period allowed"):
        table.add_column(col, justify="left" if col == "source" else "right")
    for s in states:
        table.add_row(
            formats.shown(s.name),
            formats.rate(s.rate_limit_per_s),
            "-" if s.burst is None else f"{s.burst:,.0f}",
            "-" if s.tokens is None else f"{s.tokens:,.0f}",
            "-" if s.max_running is None else f"{s.max_running:,}",
            formats.seconds(s.allowed_period_s),
        )
    return table


def over_lines(states: list[LimitState]) -> list[Text]:
    """One line per re-scan source whose rows / period exceed its rate: said, not hidden."""
    return [
        Text(
            f"{formats.shown(s.name)}: demand above rate_limit_per_s ({formats.rate(s.rate_limit_per_s)}); "
            f"the limit allows a period of {formats.seconds(s.allowed_period_s)}",
            style="yellow",
        )
        for s in states
        if s.allowed_period_s is not None
    ]


def limits_json(states: list[LimitState] | None) -> list[dict[str, Any]] | None:
    return None if states is None else [asdict(s) for s in states]
