"""The dashboard's view of fleet-wide limits: each limited source's rate, burst, tokens now and
max_running, and the period its rate allows while its demand exceeds it (said, not hidden); a
key-limited queue's max_running_per_key and busiest keys."""

from __future__ import annotations

from ...shared.storage.key_status import KeyLimitState, read_key_limits
from ...shared.storage.limits import LimitState, read_limits
from ...shared.storage.units import StorageError
from .context import WebContext


def states(ctx: WebContext) -> list[LimitState]:
    """Every limited source's and task's state; none when no limit is set, or the table is not there
    yet."""
    limited = [s for s in ctx.settings.all_sources() if s.limited]
    jobs = ctx.settings.jobs
    if not limited and not (jobs.enabled and jobs.task_limits):
        return []
    try:
        return read_limits(ctx.db(), ctx.settings.dispatcher.limits_table, limited, jobs)
    except StorageError:
        return []


def of(ctx: WebContext, source: str) -> LimitState | None:
    return next((s for s in states(ctx) if s.name == source), None)


def keys_of(ctx: WebContext, queue: str | None) -> KeyLimitState | None:
    """A key-limited queue's keys now (None: not a queue, not key-limited, or not readable yet)."""
    jobs = ctx.settings.jobs
    if queue is None or queue not in jobs.key_limits:
        return None
    try:
        return next((s for s in read_key_limits(ctx.db(), jobs) if s.queue == queue), None)
    except StorageError:
        return None
