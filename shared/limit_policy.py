"""Pure policy of fleet-wide limits (rate_limit_per_s, max_running): a token bucket's refill, how
much a claim may take, and when a bucket is worth claiming from again. No I/O; MySQL's clock is
passed in (shared/storage/limits.py reads it)."""

from __future__ import annotations


def bucket_tokens(tokens: float, elapsed_s: float, rate_per_s: float, burst: float) -> float:
    """A token bucket's tokens `elapsed_s` after its last refill (a clock that went back adds none),
    capped at `burst`; debt (a claim that took more than was left) is paid back first."""
    return min(burst, tokens + max(0.0, elapsed_s) * rate_per_s)


def limited_claim(want: int, unit: int, tokens: float | None, room: int | None) -> int:
    """Entries of `unit` checks each a claim may take: at most `want`, as many whole entries as the
    tokens pay for, and as fit the room under max_running (None: that limit is not set)."""
    n = max(0, want)
    if tokens is not None:
        n = min(n, max(0, int(tokens // unit)))
    if room is not None:
        n = min(n, max(0, room // unit))
    return n


def refill_wait_s(tokens: float, checks: float, rate_per_s: float, cap_s: float) -> float:
    """How long until the bucket holds `checks` (a claim worth making), at most `cap_s`."""
    return min(cap_s, max(0.0, (checks - tokens) / rate_per_s))
