"""What bench/task_limits.py counts from the handlers' records (bench/task_limits_app.py): starts in
1-s windows, and calls running at once. Pure but for read_calls, which reads the records."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Call:
    kind: str  # "S" limited started, "E" limited ended, "F" free started
    at: float  # time.time() in the handler
    pid: int
    id: int


def most_in_window(starts: list[float], window_s: float = 1.0) -> tuple[int, float]:
    """The most starts within any `window_s` that begins at a start (a sliding window), and where the
    first such window begins."""
    times = sorted(starts)
    best, at, lo = 0, times[0] if times else 0.0, 0
    for hi, t in enumerate(times):
        while times[lo] <= t - window_s:
            lo += 1
        if hi - lo + 1 > best:
            best, at = hi - lo + 1, times[lo]
    return best, at


def whole_seconds(starts: list[float]) -> list[int]:
    """Starts in each whole second from the first start, the first second (the bucket's initial
    burst) and the last, partial one left out: the steady pace."""
    if not starts:
        return []
    t0 = min(starts)
    per = Counter(int(t - t0) for t in starts)
    return [per[s] for s in range(1, int(max(starts) - t0))]


def most_running(calls: list[Call], killed: dict[int, float]) -> int:
    """The most limited calls running at once: each from its start to its end, or, when it never
    ended, to its process's SIGKILL (`killed`: pid -> time.time()), or to the end of time."""
    ended = {(c.pid, c.id) for c in calls if c.kind == "E"}
    events: list[tuple[float, int]] = []
    for c in calls:
        if c.kind == "E":
            events.append((c.at, -1))
        elif c.kind == "S":
            events.append((c.at, 1))
            if (c.pid, c.id) not in ended:
                events.append((killed.get(c.pid, float("inf")), -1))
    running = best = 0
    for _, step in sorted(events):  # an end at the same instant as a start counts first
        running += step
        best = max(best, running)
    return best


def open_calls(calls: list[Call]) -> Counter[int]:
    """Limited calls started and not ended, by pid."""
    ended = {(c.pid, c.id) for c in calls if c.kind == "E"}
    return Counter(c.pid for c in calls if c.kind == "S" and (c.pid, c.id) not in ended)


def read_calls(calls_dir: Path) -> list[Call]:
    """Every process's records (a line still being written is skipped)."""
    calls = []
    for path in calls_dir.glob("*.calls"):
        for line in path.read_text().splitlines():
            parts = line.split()
            if len(parts) == 3:
                calls.append(Call(parts[0], float(parts[1]), int(path.stem), int(parts[2])))
    return calls
