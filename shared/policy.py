"""Pure pacing, backoff and fencing decisions: no I/O, no clocks, exhaustively unit-tested.

Roles ask these functions how much to claim and how long to sleep (SQL adds the delays it stores),
and lease keepers when to renew and when their process must stop; callers pass the time in.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Literal


def claim_room(list_length: int, high_water: int, batch: int) -> int:
    """How many rows the dispatcher may claim now: never past the high-water mark (backpressure)."""
    return max(0, min(batch, high_water - list_length))


def dispatch_delay_s(claimed: int, room: int, poll_interval_s: float) -> float:
    """A full batch means more is probably due: claim again at once. Otherwise wait a poll."""
    if room > 0 and claimed >= room:
        return 0.0
    return poll_interval_s


def catch_up_s(period_s: float) -> float:
    """How late a range-mode span may be checked and still keep its fixed-rate slot: a second, or a
    tenth of a short period. Later than that, its cadence restarts from the check (less this), so
    an outage's backlog is not checked twice over, and the extra demand while behind is bounded
    to period / (period - catch_up), at most 11%."""
    return min(1.0, period_s / 10)


def error_backoff_s(failures: int, base_s: float, cap_s: float, rng: random.Random) -> float:
    """Exponential backoff with full jitter after `failures` consecutive failed ticks (>= 1)."""
    if failures < 1:
        return 0.0
    ceiling = min(cap_s, base_s * 2 ** min(failures - 1, 30))
    return rng.uniform(ceiling / 2, ceiling)


def retry_delay_s(errors: int, base_s: float, cap_s: float, rng: random.Random) -> float:
    """Delay before a failed job's next run, after its `errors`-th failure (>= 1).

    Exponential (base, 2x base, 4x base... up to cap) with equal jitter: at least half the step,
    so retries stay spread out without ever collapsing to zero.
    """
    if errors < 1:
        raise ValueError("retry_delay_s is for a job that failed at least once")
    step = min(cap_s, base_s * 2 ** min(errors - 1, 40))
    return rng.uniform(step / 2, step)


def dead_after_failure(errors_before: int, max_attempts: int) -> bool:
    """A job that just failed is dead when this failure uses up its attempts."""
    return errors_before + 1 >= max_attempts


def dead_after_interruption(interruptions_before: int, max_interruptions: int) -> bool:
    """A job whose worker died is dead when this was its `max_interruptions`-th interruption."""
    return interruptions_before + 1 >= max_interruptions


def stepped_delay_s(retry: int, steps: Sequence[float]) -> float:
    """Delay before a topic message's `retry`-th retry (>= 1): that step, the last one repeating.

    Stepped, not exponential, and without jitter: RocketMQ's consumer retry levels (10 s, 30 s,
    1 min ... 2 h) are what users of topic consumers expect, and a group's retries are few.
    """
    if retry < 1:
        raise ValueError("stepped_delay_s is for a message that failed at least once")
    return float(steps[min(retry, len(steps)) - 1])


def dead_after_retries(errors_before: int, max_retries: int) -> bool:
    """A message that just failed is dead when it had already been retried max_retries times."""
    return errors_before >= max_retries


def blame_interruptions(
    running: Sequence[tuple[int, int, object]], max_interruptions: int
) -> tuple[list[int], list[int], list[int]]:
    """Which interrupted jobs to blame for their worker's death: (flagged, blamed, dead) ids.

    `running`: (id, interruptions so far, batch) of jobs whose lease ran out; `batch` identifies
    the worker batch (its worker and start time). A job that ran alone (a suspect runs last and
    alone) is blamed: one more interruption, dead at max_interruptions. A job that was one of
    several is only flagged a suspect (interruptions at least 1): a worker killed from outside
    must not dead-letter healthy batch-mates.
    """
    sizes = Counter(batch for _, _, batch in running)
    flagged = [i for i, _, batch in running if sizes[batch] > 1]
    alone = [(i, n) for i, n, batch in running if sizes[batch] == 1]
    dead = [i for i, n in alone if dead_after_interruption(n, max_interruptions)]
    blamed = [i for i, n in alone if not dead_after_interruption(n, max_interruptions)]
    return flagged, blamed, dead


# -- leases: when a lease keeper renews, and when its process must stop ----------------------------

FENCE_SHARE = 0.8  # as the leader lease (dispatcher/leader.py): act on at most this share of a lease


@dataclass(frozen=True)
class LeaseTiming:
    renew_s: float  # renew this long after the last confirmation
    retry_s: float  # after a renewal that failed or could not confirm every lease, try again this soon
    fence_s: float  # no confirmation for this long: the process stops (see fence_reason)


def lease_timing(lease_s: float) -> LeaseTiming:
    """Renew every third of the lease; stop the process at 0.8 of it without a confirmation.

    Confirmations are timed from before the statement that set the leases (the database's NOW(6)
    came later), so at the fence a fifth of the lease is still left for the process to end before
    any sweeper can see the lease run out.
    """
    return LeaseTiming(lease_s / 3, lease_s / 30, lease_s * FENCE_SHARE)


def keeper_fits(lease_s: float, keeper_timeout_s: float) -> bool:
    """Whether one renewal, started on time and stalled once connecting and once reading (each cut
    off after keeper_timeout_s), is over before the fence: one stall must not stop a healthy worker."""
    timing = lease_timing(lease_s)
    return timing.renew_s + 2 * keeper_timeout_s < timing.fence_s


def shortest_lease_s(keeper_timeout_s: float) -> float:
    """The lease keeper_fits needs more than, for a keeper timeout (for error messages)."""
    return 2 * keeper_timeout_s / (FENCE_SHARE - 1 / 3)


Renewal = Literal["confirmed", "lost", "unknown"]


def renewal_outcome(needed: Collection[int], kept: Collection[int], gone: Collection[int]) -> Renewal:
    """What one renewal proved about the ids a batch still needs leased (those not being acked).

    "lost": one is no longer running under its attempt, so another worker may run it now;
    "confirmed": every one was extended; "unknown": some were locked by another session (neither).
    """
    if any(i in gone for i in needed):
        return "lost"
    return "confirmed" if all(i in kept for i in needed) else "unknown"


Fence = Literal["lost", "unconfirmed", "hung"]


def fence_reason(
    now: float,
    *,
    confirmed: float,
    started: float,
    lost: bool,
    timing: LeaseTiming,
    timeout_s: float | None,
) -> Fence | None:
    """Why a process holding a batch must stop now (times on one monotonic clock), or None.

    "lost": a lease is gone; "unconfirmed": the leases were last confirmed fence_s ago and may run
    out before another renewal lands; "hung": the batch has run longer than its timeout.
    """
    if lost:
        return "lost"
    if now >= confirmed + timing.fence_s:
        return "unconfirmed"
    if timeout_s is not None and now >= started + timeout_s:
        return "hung"
    return None
