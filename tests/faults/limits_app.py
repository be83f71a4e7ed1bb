"""Handlers for the limits tests (`--app tests.faults.limits_app`): each call of the one-off source's
async row handler, and of the async task `limited` (its job's id), appends "S <time> <pid> <id>" when
it starts and "E <time> <pid> <id>" when it ends to DUECAST_TEST_EXEC_LOG (one os.write per line,
O_APPEND), after DUECAST_TEST_ROW_DELAY_MS. The task `free` only returns (a task with no limit)."""

from __future__ import annotations

import asyncio
import os
import time
from dataclasses import dataclass
from pathlib import Path

from duecast import current_job
from duecast.shared.acks import Row
from duecast.shared.api.handlers import Registry
from tests.faults.app import ONEOFF

handlers = Registry()


def _log(kind: str, row_id: int) -> None:
    line = f"{kind} {time.time():.6f} {os.getpid()} {row_id}\n".encode()
    fd = os.open(os.environ["DUECAST_TEST_EXEC_LOG"], os.O_APPEND | os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


@handlers.row(ONEOFF)
async def call(row: Row) -> None:
    _log("S", int(row["id"]))
    await asyncio.sleep(int(os.environ.get("DUECAST_TEST_ROW_DELAY_MS", "0")) / 1000)
    _log("E", int(row["id"]))


@handlers.task("limited")
async def limited(_payload: object) -> None:
    job_id = current_job().id
    _log("S", job_id)
    await asyncio.sleep(int(os.environ.get("DUECAST_TEST_ROW_DELAY_MS", "0")) / 1000)
    _log("E", job_id)


@handlers.task("free")
async def free(_payload: object) -> None:
    return None


@dataclass(frozen=True)
class Call:
    kind: str  # "S" started, "E" ended
    at: float  # time.time() in the handler
    pid: int
    id: int


def read_calls(path: Path) -> list[Call]:
    if not path.exists():
        return []
    calls = []
    for line in path.read_text().splitlines():
        kind, at, pid, row_id = line.split()
        calls.append(Call(kind, float(at), int(pid), int(row_id)))
    return calls


def claim_bound(rate: int) -> int:
    """The most claims (or dispatches) one 1-s window may hold under rate_limit_per_s = `rate`:
    issue 27's own bound, 1.1 x the rate. The bucket hands out at most rate + rate / 20 a second by
    MySQL's clock at the reservation, its own transaction; a claim's rows get their NOW(6) when the
    claim's UPDATE runs, after that commit, so a delay of d between the two moves up to rate x d
    claims into the next window: 214 at 200/s in one clean-clone run (a delay of 20 ms or more on a
    loaded machine), where the bucket alone allows 210. A limit lost across the leader's failover
    shows as both dispatchers' rates together, about twice the rate."""
    return rate * 11 // 10


def most_in_window(starts: list[float], window_s: float = 1.0) -> int:
    """The most calls that started within any `window_s` (every window that begins at a start)."""
    times = sorted(starts)
    best, lo = 0, 0
    for hi, t in enumerate(times):
        while times[lo] <= t - window_s:
            lo += 1
        best = max(best, hi - lo + 1)
    return best


def most_running(calls: list[Call], killed: dict[int, float]) -> int:
    """The most calls running at once: from each start to its end, or to its process's SIGKILL
    (`killed`: pid -> time.time() of the kill) when it never ended."""
    ended = {(c.pid, c.id) for c in calls if c.kind == "E"}
    events: list[tuple[float, int]] = []
    for c in calls:
        if c.kind == "E":
            events.append((c.at, -1))
        else:
            events.append((c.at, 1))
            if (c.pid, c.id) not in ended:
                events.append((killed.get(c.pid, float("inf")), -1))
    running = best = 0
    for _, step in sorted(events):  # an end at the same instant as a start is counted first
        running += step
        best = max(best, running)
    return best
