"""Waiting for something in a test: poll a predicate every 50 ms, fail with a message on timeout."""

from __future__ import annotations

import time
from collections.abc import Callable


def wait_until(
    predicate: Callable[[], object], what: str, timeout_s: float = 10.0, interval_s: float = 0.05
) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")
        time.sleep(interval_s)
