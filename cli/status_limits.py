"""`duecast status`'s limits: each limited source's, queue's and task's (`task:<name>`) rate, burst
and max_running, the tokens its bucket holds now, and, while its demand exceeds its rate, the period
the limit allows; and each key-limited queue's max_running_per_key and busiest keys (cli.status's
`key_limits`)."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from rich.table import Table
from rich.text import Text

from ..shared.storage.key_status import KeyLimitState
from ..shared.storage.limits import LimitState
from . import formats
from .status_view import Keyed


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


def key_limits_table(states: list[KeyLimitState]) -> Keyed | None:
    """A row per key-limited queue's busiest key (its jobs in flight / max_running_per_key), the
    queue's counts of keys on its first row; a queue with no key in flight has one row, key `-`.
    Keyed by queue and key, so a table split to fit the terminal repeats both."""
    if not states:
        return None
    table = Keyed(title="concurrency keys", keys=2)
    for col in ("queue", "key", "in flight/max", "keys in flight", "keys pending"):
        table.add_column(col, justify="left" if col in ("queue", "key") else "right")
    for s in states:
        more = "+" if s.partial else ""
        counts = (f"{s.keys_in_flight:,}{more}", f"{s.keys_pending:,}{'+' if s.pending_capped else ''}")
        for i, (key, n) in enumerate(s.busiest or [("-", 0)]):
            table.add_row(
                formats.shown(s.queue),
                formats.shown(key),
                f"{n:,}/{s.max_running_per_key:,}",
                *(counts if i == 0 else ("", "")),
            )
    return table


def key_limits_json(states: list[KeyLimitState] | None) -> list[dict[str, Any]] | None:
    """Per queue: max_running_per_key, busiest as [{key, in_flight}], keys_in_flight, keys_pending
    (`keys_pending_capped`: of the first JOBS_READ pending jobs only), partial."""
    if states is None:
        return None
    return [
        {
            "queue": s.queue,
            "max_running_per_key": s.max_running_per_key,
            "busiest": [{"key": k, "in_flight": n} for k, n in s.busiest],
            "keys_in_flight": s.keys_in_flight,
            "keys_pending": s.keys_pending,
            "keys_pending_capped": s.pending_capped,
            "partial": s.partial,
        }
        for s in states
    ]
