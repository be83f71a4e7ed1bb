"""What a handler says about a row: the Ack (touch, delete, retry, discard, a transactional task's
work) and the Row it is about. Vocabulary shared by the public API and the storage that applies it."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

from .identifiers import check_identifier
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
        """Mark the row handled now (due again after its period + delay_s), setting `values`."""
        if not math.isfinite(delay_s) or delay_s < 0:
            raise ValueError(f"delay_s must be a finite number >= 0, not {delay_s!r}")
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
        it does not use up an attempt."""
        if at is not None:
            if at.tzinfo is None or at.utcoffset() is None:
                raise ValueError("Ack.retry(at=...) needs a timezone-aware datetime")
            return cls("retry", at=at.astimezone(UTC).replace(tzinfo=None))
        if not math.isfinite(delay_s) or delay_s < 0:
            raise ValueError(f"delay_s must be a finite number >= 0, not {delay_s!r}")
        return cls("retry", delay_s=float(delay_s))

    @classmethod
    def discard(cls, reason: str = "") -> Ack:
        """Jobs: stop here, no further attempts; the job is kept as dead with `reason` as its error."""
        return cls("discard", reason=str(reason))


_DEFAULT = Ack()
