"""Pure pacing and backoff decisions: no I/O, no clocks, exhaustively unit-tested.

Roles ask these functions how much to claim and how long to sleep; SQL adds the delays it stores.
"""

from __future__ import annotations

import random


def claim_room(list_length: int, high_water: int, batch: int) -> int:
    """How many rows the dispatcher may claim now: never past the high-water mark (backpressure)."""
    return max(0, min(batch, high_water - list_length))


def dispatch_delay_s(claimed: int, room: int, poll_interval_s: float) -> float:
    """A full batch means more is probably due: claim again at once. Otherwise wait a poll."""
    if room > 0 and claimed >= room:
        return 0.0
    return poll_interval_s


def error_backoff_s(failures: int, base_s: float, cap_s: float, rng: random.Random) -> float:
    """Exponential backoff with full jitter after `failures` consecutive failed ticks (>= 1)."""
    if failures < 1:
        return 0.0
    ceiling = min(cap_s, base_s * 2 ** min(failures - 1, 30))
    return rng.uniform(ceiling / 2, ceiling)
