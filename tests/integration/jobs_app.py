"""Tasks for the jobs tests: every run is recorded with the time the handler started."""

from __future__ import annotations

import threading
import time
from typing import Any

from duecast import Registry

handlers = Registry()
RUNS: list[tuple[Any, float]] = []
_lock = threading.Lock()


@handlers.task("record")
def record(payload: Any) -> None:
    with _lock:
        RUNS.append((payload, time.time()))
