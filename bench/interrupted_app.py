"""The workers' handlers for bench/interrupted.py: a job task and a cluster group's consumer that hold
their batch until the file DUECAST_BENCH_GATE names exists (so the kill lands mid-batch), then do
nothing; and for --poison, a healthy job that does nothing and a poison job that kills its worker."""

from __future__ import annotations

import os
import signal
import time
from typing import Any

from duecast import Message, Registry

handlers = Registry()
HOLD_MAX_S = 120.0  # a forgotten gate must not hold a worker forever


def _hold() -> None:
    gate = os.environ["DUECAST_BENCH_GATE"]
    deadline = time.monotonic() + HOLD_MAX_S
    while not os.path.exists(gate) and time.monotonic() < deadline:
        time.sleep(0.05)


@handlers.task("hold")
def hold(payload: Any) -> None:
    _hold()


@handlers.consumer("interrupted", group="held")
def held(message: Message) -> None:
    _hold()


@handlers.task("quick")
def quick(payload: Any) -> None:
    """A healthy job for --poison: nothing to do."""


@handlers.task("die")
def die(payload: Any) -> None:
    """A poison job for --poison: it SIGKILLs whichever worker runs it, every time, after appending
    the time of its death to the file DUECAST_BENCH_DEATHS names."""
    with open(os.environ["DUECAST_BENCH_DEATHS"], "a") as f:
        f.write(f"{time.time()}\n")
    os.kill(os.getpid(), signal.SIGKILL)
