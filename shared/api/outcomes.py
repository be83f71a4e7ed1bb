"""What a handler's call comes to: a task's return value as an Ack (its result, kept with the done job),
and the error of a call that ran past its time limit. Shared by the worker and duecast.testing."""

from __future__ import annotations

import json

from ..acks import Ack
from ..errors import DuecastError


def task_outcome(value: object) -> Ack | None:
    """What a task's return value means: None and an Ack as for any handler; any other value is
    its result, done and kept as JSON text (a value JSON cannot hold fails the run: TypeError)."""
    if value is None or isinstance(value, Ack):
        return value
    try:
        text = json.dumps(value, allow_nan=False, ensure_ascii=False, separators=(",", ":"))
    except (TypeError, ValueError, RecursionError) as exc:
        raise TypeError(
            f"a task must return None, an Ack or a JSON value (its result), not {type(value).__name__}: {exc}"
        ) from exc
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise TypeError("a task's result holds a lone surrogate, which utf8mb4 cannot store") from exc
    return Ack(result=text)


def outcome(value: object) -> Ack | BaseException:
    """One batch item as a row outcome: a non-Ack fails that row only."""
    try:
        return as_ack(value)
    except TypeError as exc:
        return exc


def as_ack(value: object) -> Ack:
    if value is None:
        return Ack.default()
    if not isinstance(value, Ack):
        raise TypeError(f"a handler must return an Ack or None, not {type(value).__name__}")
    return value


class TimedOut(DuecastError, TimeoutError):
    """A handler call that ran past its time limit (a failure like any other); the worker and
    duecast.testing make the same one."""

    def __init__(self, source: str, limit_s: float) -> None:
        super().__init__(f"{source}: the handler ran longer than its timeout_s ({limit_s:g}s)")
        self.limit_s = limit_s


class InvalidAck(DuecastError, ValueError):
    """An Ack the row's store refuses (an action, a delay or a column not allowed there): that
    row's failure, logged in one line with why, never sent to the database."""
