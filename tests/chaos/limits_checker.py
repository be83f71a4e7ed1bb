"""Judge a chaos run's fleet-wide limits from independent records (pure: read_calls reads a log).

**Rate** (`rate_limit_per_s`, `rate_burst`): what the limit governs is claims, so claims are what is
counted: every claim of a row, as a trigger recorded it in the claim's own statement (its
`dc_dispatched_at`, tests/chaos/rescan.py). `RateLimit.bound` derives what any window may hold.
Handler starts are not held to that: the limit is enforced where work leaves MySQL, and claims go
on at the rate while workers cannot start (dead after a read lock, restarting), so what waited in
Redis starts at once when they are back; a worker SIGSTOPped with a batch in hand runs it when
resumed. They are held to what can have been claimed in the window plus what can have waited
(`judge_rate`'s `buffered`).

**Concurrency** (`max_running`, and per key once keys exist): counted from the handlers' own start
and end records, per key and fleet-wide, with the time a process was really running them
(`spans`).
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tests.chaos.checker import Fault
from tests.chaos.execlog import records

FLEET = "*"  # the key of the fleet-wide count in `most_running`'s answer
# A fault is recorded (the database's clock) just before its signal is sent: a call that started
# this soon after a SIGSTOP's record was frozen by it, not run after it.
SIGNAL_S = 0.05
_STOPS = {"sigstop", "sigstop_in_ack"}
_DEATHS = {"sigkill", "died"}


@dataclass(frozen=True)
class RateLimit:
    """A token bucket as the dispatcher keeps it (shared/storage/limits.py): at most `burst` tokens,
    refilled at `rate_per_s`; a claim first takes its tokens (reserve, committed), then claims."""

    rate_per_s: float
    burst: float
    # Dispatchers that may hold a grant not yet claimed at one moment: one claims at a time (the
    # leader); a failover's old leader killed mid-claim claims nothing (its claim rolls back).
    claimers: int = 1

    def bound(self, window_s: float) -> float:
        """The most checks claims may take in any window of `window_s`.

        Taken tokens: the bucket holds at most `burst` when a window opens and refills
        `rate_per_s * window_s` during it, so reserves within a window take at most their sum; the
        bucket is one MySQL row every dispatcher locks, so a new leader after a failover takes from
        the same tokens (a doubled rate would show). But a claim is timed by its own statement,
        after its reserve: a grant reserved before a window and claimed inside it (a dispatcher
        descheduled, or its reserve's COMMIT held by a read lock, between the two) adds what it
        took, at most `burst`, for each dispatcher that can hold one."""
        return self.rate_per_s * window_s + self.burst * (1 + self.claimers)


def most_in_window(times: Sequence[float], window_s: float) -> tuple[int, float]:
    """The most of `times` (sorted) within any `window_s`, and where that window starts."""
    best, at, lo = 0, times[0] if times else 0.0, 0
    for hi, t in enumerate(times):
        while times[lo] <= t - window_s:
            lo += 1
        if hi - lo + 1 > best:
            best, at = hi - lo + 1, times[lo]
    return best, at


@dataclass
class RateVerdict:
    claims: int
    statements: int  # claim statements (distinct claim times): claims come as often as tokens refill
    windows: dict[float, tuple[int, float, float]]  # window_s -> (most claims, where, bound)
    starts: tuple[int, float, float]  # handler starts: the most in 1 s, where, bound

    @property
    def over(self) -> dict[str, int]:
        """What exceeded its bound: "claims <window>s" or "starts 1s" -> how many."""
        out = {f"claims {w:g}s": most for w, (most, _, bound) in self.windows.items() if most > bound}
        if self.starts[0] > self.starts[2]:
            out["starts 1s"] = self.starts[0]
        return out

    def summary(self, limit: RateLimit) -> str:
        parts = ", ".join(
            f"{w:g}s: {most} (bound {bound:.0f})" for w, (most, _, bound) in sorted(self.windows.items())
        )
        return (
            f"rate {limit.rate_per_s:g}/s burst {limit.burst:g}: {self.claims:,} claims in "
            f"{self.statements:,} statements, the most in "
            f"any window of {parts}; handler starts, the most in 1 s: {self.starts[0]} "
            f"(bound {self.starts[2]:.0f})"
        )


def judge_rate(
    limit: RateLimit,
    claims: Sequence[float],
    starts: Sequence[float],
    buffered: int,
    windows: Iterable[float] = (1.0, 10.0),
) -> RateVerdict:
    """`claims`: when each check was claimed (the database's clock); `starts`: handler starts;
    `buffered`: the most checks that can wait between their claim and their start. Each start in a
    window is of a check claimed in it, or of one that waited when it opened: in the ready list
    (at most high_water plus a claim that found it just below), or popped into a worker's hands
    (a pop batch per worker process, stopped ones too)."""
    times, begun = sorted(claims), sorted(starts)
    found = {w: (*most_in_window(times, w), limit.bound(w)) for w in windows}
    starts_1s = (*most_in_window(begun, 1.0), limit.bound(1.0) + buffered)
    return RateVerdict(len(times), len(set(times)), found, starts_1s)


# ---------------------------------------------------------------- concurrency


@dataclass(frozen=True)
class Call:
    """One handler call of a limited task, from its start and end records."""

    n: int
    key: str
    pid: int
    at: float  # its start (time.time(): the same machine's clock as the database's)
    end: float | None  # None: never logged, its process killed, stopped or dead first


def read_calls(path: Path) -> list[Call]:
    """Calls from "S|E n key pid time" records; an end closes the oldest open start of (n, pid)."""
    opened: dict[tuple[int, int], list[tuple[str, float]]] = defaultdict(list)
    calls: list[Call] = []
    for kind, n, key, pid, at in records(path):
        who = (int(n), int(pid))
        if kind == "S":
            opened[who].append((key, float(at)))
        elif opened[who]:
            key0, start = opened[who].pop(0)
            calls.append(Call(who[0], key0, who[1], start, float(at)))
    calls += [Call(n, key, pid, at, None) for (n, pid), left in opened.items() for key, at in left]
    return sorted(calls, key=lambda c: c.at)


@dataclass(frozen=True)
class Span:
    key: str
    start: float
    end: float  # inf: never ended, and nothing explains it (counted as running for good)


def spans(calls: Iterable[Call], faults: Sequence[Fault]) -> list[Span]:
    """The time each call really ran. A process SIGSTOPped ran nothing from its stop on: a call it
    had started (or started just before the signal landed) ends there, though it may log its end
    once resumed (its lease ran out meanwhile and the limit gave its slot to another call, by design:
    no one can end a frozen process's call). A call never ended, of a process killed or found dead,
    ends at that fault."""
    stops: dict[int, list[float]] = defaultdict(list)
    deaths: dict[int, float] = {}
    for f in faults:
        if f.pid is not None and f.kind in _STOPS:
            stops[f.pid].append(f.at)
        elif f.pid is not None and f.kind in _DEATHS:
            deaths.setdefault(f.pid, f.at)
    out = []
    for c in calls:
        end = c.end if c.end is not None else deaths.get(c.pid, float("inf"))
        frozen = sorted(stops.get(c.pid, []))
        i = bisect.bisect_left(frozen, c.at - SIGNAL_S)  # the first stop at or after the start
        if i < len(frozen) and frozen[i] < end:
            end = frozen[i]
        out.append(Span(c.key, c.at, max(c.at, end)))
    return out


def most_running(found: Iterable[Span]) -> dict[str, tuple[int, float]]:
    """Per key, and fleet-wide (FLEET), the most spans running at once and when (an end at the
    same instant as a start is counted first)."""
    events: dict[str, list[tuple[float, int]]] = defaultdict(list)
    for s in found:
        for key in (s.key, FLEET):
            events[key] += [(s.start, 1), (s.end, -1)]
    out = {}
    for key, steps in events.items():
        running, best, at = 0, 0, 0.0
        for t, step in sorted(steps):
            running += step
            if running > best:
                best, at = running, t
        out[key] = (best, at)
    return out


@dataclass
class RunningVerdict:
    """`most`: per key and FLEET, the most calls running at once and when; `over`: where a limit
    (`limits`: per key, and FLEET for max_running) was exceeded."""

    calls: int
    most: dict[str, tuple[int, float]]
    limits: Mapping[str, int]
    over: dict[str, int] = field(default_factory=dict)

    def summary(self) -> str:
        keys = ", ".join(f"{k} {m}" for k, (m, _) in sorted(self.most.items()) if k != FLEET)
        fleet = self.most.get(FLEET, (0, 0.0))[0]
        return (
            f"{self.calls:,} calls, at most {fleet} running at once (max_running "
            f"{self.limits.get(FLEET, '-')}); per key: {keys or 'none'}"
        )


def judge_running(
    calls: Sequence[Call], faults: Sequence[Fault], max_running: int | None, per_key: int | None = None
) -> RunningVerdict:
    """`max_running`: the fleet-wide limit; `per_key`: the limit of every key (None: unset)."""
    most = most_running(spans(calls, faults))
    limits = {k: per_key for k in most if k != FLEET} if per_key is not None else {}
    if max_running is not None:
        limits[FLEET] = max_running
    over = {k: most[k][0] for k, cap in limits.items() if most[k][0] > cap}
    return RunningVerdict(len(calls), most, limits, over)
