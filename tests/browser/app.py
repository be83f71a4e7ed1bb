"""Handlers for the browser tests: a re-scan source that checks users, and a task that fails until fixed."""

from __future__ import annotations

import threading
from typing import Any

from duecast import Ack, Registry, Row

handlers = Registry()
SOURCE = "users"


class Flaky:
    """The `flaky` task raises while `broken` is set; every run is recorded."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.reset()

    def reset(self) -> None:
        with self.lock:
            self.broken = True
            self.runs: list[Any] = []


FLAKY = Flaky()


@handlers.row(SOURCE, columns=["status"])
def check(row: Row) -> Ack | None:
    return None


@handlers.task("flaky")
def flaky(payload: Any) -> None:
    with FLAKY.lock:
        FLAKY.runs.append(payload)
        broken = FLAKY.broken
    if broken:
        raise ConnectionError(f"the mail server refused {payload['email']}")
