"""Handler app for the in-process dispatcher/worker tests: sources "rescan", "oneoff" and a job task.

Every handler records what it ran in RECORDER; tests steer failures and acks per id through it.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable
from typing import Any

from duecast import Ack, Registry, Row

handlers = Registry()

RESCAN, ONEOFF = "rescan", "oneoff"


class Recorder:
    """Thread-safe log of handler runs; `fail_once` ids raise on attempt 1, `acks` overrides an id's
    Ack (a callable is called in the handler, so an Ack that cannot be built fails that row)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.reset()

    def reset(self) -> None:
        with self._lock:
            self.runs: list[tuple[str, int, int]] = []  # (source, id, attempt) per execution
            self.fail_once: set[int] = set()
            self.acks: dict[int, Ack | Callable[[], Ack]] = {}
            self.tasks: list[Any] = []

    def record(self, source: str, row_id: int, attempt: int) -> None:
        with self._lock:
            self.runs.append((source, row_id, attempt))

    def record_task(self, payload: Any) -> None:
        with self._lock:
            self.tasks.append(payload)

    def ack_for(self, row_id: int) -> Ack | None:
        ack = self.acks.get(row_id)
        return ack() if callable(ack) else ack

    def executions(self, source: str) -> Counter[int]:
        with self._lock:
            return Counter(i for s, i, _ in self.runs if s == source)

    def attempts(self, source: str, row_id: int) -> list[int]:
        with self._lock:
            return [a for s, i, a in self.runs if s == source and i == row_id]


RECORDER = Recorder()


@handlers.row(RESCAN, columns=["status"])
def check(row: Row) -> Ack | None:
    row_id, attempt = int(row["user_id"]), int(row["dc_attempt"])
    RECORDER.record(RESCAN, row_id, attempt)
    if row_id in RECORDER.fail_once and attempt == 1:
        raise RuntimeError(f"row {row_id} fails on its first attempt")
    return RECORDER.ack_for(row_id)


@handlers.batch(ONEOFF, columns=["payload"])
def finish(rows: list[Row]) -> list[Ack | None]:
    for row in rows:
        assert row["payload"] == f"p{row['id']}"
        RECORDER.record(ONEOFF, int(row["id"]), int(row["dc_attempt"]))
    return [RECORDER.ack_for(int(row["id"])) for row in rows]


@handlers.task("remember")
def remember(payload: Any) -> None:
    RECORDER.record_task(payload)
