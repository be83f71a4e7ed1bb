"""What a handler says about a row: the Ack (touch, delete, retry, discard, a transactional task's
work) and the Row it is about. Vocabulary shared by the public API and the storage that applies it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

from .identifiers import check_identifier
from .limits import CEILING, DELAY_CEILING_S, delay_refusal, moment_refusal, storable_text
from .states import DISPATCH_COLUMNS

Row = dict[str, Any]


@dataclass(frozen=True)
class Ack:
    """What to do with a handled row. Returning None from a handler means `Ack.default()`."""

    action: Literal["default", "touch", "delete", "retry", "discard", "transaction"] = "default"
    delay_s: float = 0.0  # touch: push the due time this much further than the period; retry: wait
    values: tuple[tuple[str, Any], ...] = field(default=())  # touch: columns to set
    at: datetime | None = None  # retry: run again at this moment (timezone-aware)
    reason: str = ""  # discard: why, kept as the dead job's error
    # "transaction": a job whose work runs in the worker's ack transaction (Registry.task(...,
    # transactional=True)); it gets the cursor and returns the job's real Ack.
    work: Callable[[Any], Ack | None] | None = field(default=None, compare=False)
    # A job done with a value: its task's return value as JSON text (Registry), kept with the done
    # job (docs/jobs.md, "Results"). None: the task returned None or an Ack.
    result: str | None = field(default=None, compare=False)

    @classmethod
    def default(cls) -> Ack:
        """The source's `on_success` action (touch for re-scan sources, delete for one-off work)."""
        return _DEFAULT  # immutable, so one object serves every row (and is cheap to compare)

    @classmethod
    def touch(cls, delay_s: float = 0.0, **values: Any) -> Ack:
        """Mark the row handled now (due again after its period + delay_s), setting `values`.
        delay_s: 0 to jobs.max_delay_s (shared.limits)."""
        _check_delay(delay_s, DELAY_CEILING_S)
        for name in values:
            check_identifier(name)
            if name in DISPATCH_COLUMNS:
                # Setting these would corrupt the (id, attempt, state) fence of the ack itself.
                raise ValueError(f"{name} is duecast's own column; a handler may not set it")
        return cls("touch", float(delay_s), tuple(sorted(values.items())))

    @classmethod
    def delete(cls) -> Ack:
        """Remove the row: it is done for good."""
        return cls("delete")

    @classmethod
    def retry(cls, delay_s: float = 0.0, *, at: datetime | None = None) -> Ack:
        """Jobs: run this job again after `delay_s`, or at `at` (an aware datetime). Not an error:
        it does not use up an attempt. Both at most jobs.max_delay_s ahead (10 years), as at enqueue."""
        if at is not None:
            why = moment_refusal(at, datetime.now(UTC), DELAY_CEILING_S, CEILING)
            if why is not None:
                raise ValueError(f"Ack.retry(at=...) {why}")
            return cls("retry", at=at.astimezone(UTC).replace(tzinfo=None))
        _check_delay(delay_s, DELAY_CEILING_S)
        return cls("retry", delay_s=float(delay_s))

    @classmethod
    def discard(cls, reason: str = "") -> Ack:
        """Jobs: stop here, no further attempts; the job is kept as dead with `reason` as its error
        (made storable: a lone surrogate escaped, cut to shared.limits.ERROR_TEXT_MAX characters)."""
        return cls("discard", reason=storable_text(str(reason)))


_DEFAULT = Ack()


def _check_delay(delay_s: object, max_delay_s: float) -> None:
    """A constructor's check: the configured cap is not known yet, so the most it may be set to
    (the store applies jobs.max_delay_s itself, to every Ack: check_times)."""
    why = delay_refusal(delay_s, max_delay_s, CEILING)
    if why is not None:
        raise ValueError(f"delay_s {why}")


def check_times(ack: Ack, max_delay_s: float, now: datetime | None = None) -> None:
    """Refuse (ValueError) an Ack whose delay or moment is past the cap, not finite or negative:
    what the constructors check, applied by the stores to every Ack, a hand-built one too
    (`Ack("retry", delay_s=float("nan"))`), with the configured cap (jobs.max_delay_s). `now`
    (aware; default the app clock) bounds `at` only. Cheap for the common Ack (no delay, no at):
    stores call it for every row."""
    if ack.delay_s == 0 and ack.at is None and isinstance(ack.reason, str):
        return
    what = f"Ack.{ack.action}()"
    why = delay_refusal(ack.delay_s, max_delay_s)
    if why is not None:
        raise ValueError(f"{what}: delay_s {why}")
    if ack.at is not None:
        at = ack.at if not isinstance(ack.at, datetime) or ack.at.tzinfo else ack.at.replace(tzinfo=UTC)
        why = moment_refusal(at, now or datetime.now(UTC), max_delay_s)
        if why is not None:
            raise ValueError(f"{what}: at {why}")
    if not isinstance(ack.reason, str):
        raise ValueError(f"{what}: reason must be a string, not {type(ack.reason).__name__}")
