"""Pure pacing and backoff decisions: no I/O, no clocks, exhaustively unit-tested.

Roles ask these functions how much to claim and how long to sleep; SQL adds the delays it stores.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Sequence


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
