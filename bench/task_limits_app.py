"""The workers' task module for bench/task_limits.py: `limited` (its limits set by the benchmark)
records each call's start and end, `free` (no limit) its start, as "<kind> <time.time()> <job id>"
lines in this process's own file of DUECAST_BENCH_CALLS_DIR (one os.write each: a SIGKILL loses none)."""

from __future__ import annotations

import asyncio
import functools
import os
import time
from pathlib import Path

from duecast import Registry, current_job

handlers = Registry()
DELAY_S = int(os.environ.get("DUECAST_BENCH_DELAY_MS", "0")) / 1000


@functools.cache
def _calls_fd() -> int:
    path = Path(os.environ["DUECAST_BENCH_CALLS_DIR"]) / f"{os.getpid()}.calls"
    return os.open(path, os.O_APPEND | os.O_WRONLY | os.O_CREAT, 0o644)


def _record(kind: str) -> None:
    os.write(_calls_fd(), f"{kind} {time.time():.6f} {current_job().id}\n".encode())


@handlers.task("limited")
async def limited(_payload: object) -> None:
    _record("S")
    if DELAY_S:
        await asyncio.sleep(DELAY_S)
    _record("E")


@handlers.task("free")
async def free(_payload: object) -> None:
    _record("F")
