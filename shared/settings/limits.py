"""Fleet-wide limits on what leaves MySQL for a source or a job queue: a rate (checks per second, with
a burst) and a ceiling on checks started and unfinished. Enforced by the dispatcher at claim time."""

from __future__ import annotations

from typing import Self

from pydantic import Field, model_validator

from .base import _Section

MAX_RATE_PER_S = 10_000_000.0  # more than any one MySQL can claim: a bigger number is a typo
MAX_RUNNING = 10_000_000


class Limits(_Section):
    """`rate_limit_per_s`: checks (rows, or jobs) claimed per second across every dispatcher, as a
    token bucket holding at most `rate_burst` checks (unset: a twentieth of a second's worth, at least
    two entries, so any 1-s window holds at most 1.05 x the rate, with room left for the jitter
    between a claim and its call). `max_running`: checks dispatched or started and not yet finished,
    across every worker. Unset: no limit."""

    # Checks (rows, or jobs; a range counts its range_size) claimed per second, across every
    # dispatcher and through a leader failover (docs/limits.md). Unset: no rate limit.
    rate_limit_per_s: float | None = Field(None, gt=0, le=MAX_RATE_PER_S, allow_inf_nan=False)
    # The most checks claimed at once after a quiet spell; unset: a twentieth of a second's worth.
    rate_burst: float | None = Field(None, ge=1, le=MAX_RATE_PER_S, allow_inf_nan=False)
    # Checks dispatched or started and not finished, across every worker (a dead worker's come back
    # when their leases run out). Unset: no limit.
    max_running: int | None = Field(None, ge=1, le=MAX_RUNNING)

    @model_validator(mode="after")
    def _burst_needs_rate(self) -> Self:
        if self.rate_burst is not None and self.rate_limit_per_s is None:
            raise ValueError("rate_burst is set without rate_limit_per_s; set both, or neither")
        return self

    @property
    def limited(self) -> bool:
        return self.rate_limit_per_s is not None or self.max_running is not None

    def burst(self, unit: int = 1) -> float:
        """The bucket's size: rate_burst, or a twentieth of a second's worth and at least two entries
        of `unit` checks (a range in range mode), so a claim can always be paid for and the bucket
        never fills up between two claims (a full bucket drops what it refills)."""
        if self.rate_burst is not None:
            return self.rate_burst
        rate = self.rate_limit_per_s or 0.0
        return max(2.0 * unit, rate / 20.0)


class KeyLimits(_Section):
    """`[jobs.key_limits.<queue>]`: jobs of one concurrency key (given at enqueue: an account, a
    tenant) dispatched or started and not finished, across every worker; the queue's keys are
    served in turn (docs/protecting.md, "Concurrency keys")."""

    # Jobs of one key of this queue running at once, fleet-wide (a dead worker's come back when
    # their leases run out). Required: a section without it limits nothing.
    max_running_per_key: int = Field(ge=1, le=MAX_RUNNING)


def unit_refusal(name: str, limits: Limits, unit: int, what: str) -> str | None:
    """Why a source's limits cannot be met by entries of `unit` checks each (`what` names the
    setting that sets `unit`), or None."""
    if unit <= 1:
        return None
    if limits.rate_burst is not None and limits.rate_burst < unit:
        return (
            f"source {name}: rate_burst ({limits.rate_burst}) is smaller than {what} ({unit}): a span "
            f"of {unit} ids is claimed at once and could never be paid for; raise rate_burst"
        )
    if limits.max_running is not None and limits.max_running < unit:
        return (
            f"source {name}: max_running ({limits.max_running}) is smaller than {what} ({unit}): a "
            f"span of {unit} ids is claimed at once and would never fit; raise max_running"
        )
    return None
