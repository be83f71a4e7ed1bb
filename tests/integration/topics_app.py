"""Consumers for the topics tests: every handling is recorded (group, message id, attempt, thread).

A message whose payload names a group in "fail" always fails in that group; "effects" consumers are
transactional and write one row per handling into the table the payload names.
"""

from __future__ import annotations

import threading
from typing import Any, NamedTuple

import pymysql.cursors

from duecast import Registry
from duecast.shared.api.messages import Message

handlers = Registry()
_lock = threading.Lock()


class Run(NamedTuple):
    group: str
    id: int
    attempt: int
    thread: str


RUNS: list[Run] = []


def runs(group: str) -> list[int]:
    """Message ids `group` handled, in order (repeats included)."""
    with _lock:
        return [r.id for r in RUNS if r.group == group]


def _record(message: Message) -> None:
    with _lock:
        RUNS.append(Run(message.group, message.id, message.attempt, threading.current_thread().name))
    payload = message.payload if isinstance(message.payload, dict) else {}
    if message.group in payload.get("fail", ()):
        raise RuntimeError(f"{message.group} cannot take message {message.id}")
    if message.group in payload.get("fail_surrogate", ()):  # a file name, as os.listdir gives it
        raise RuntimeError("cannot open " + b"report-\xff.csv".decode("utf-8", "surrogateescape"))
    if message.group in payload.get("exit", ()):
        raise SystemExit(4)


for _group in ("billing", "shipping", "audit"):
    handlers.consumer("orders", group=_group)(_record)


@handlers.consumer("orders", group="cache")
def cache(message: Message) -> None:
    _record(message)


@handlers.consumer("ledger", group="books", transactional=True)
def books(message: Message, cursor: pymysql.cursors.Cursor) -> Any:
    _record(message)
    cursor.execute(
        f"INSERT INTO `{message.payload['table']}` (grp, msg) VALUES (%s, %s)", (message.group, message.id)
    )
