"""Classify a chaos run's jobs (and the cluster group's messages) from the execution log, the acks
table, the fault log and the jobs left; and measure how long the work each fault caught in workers'
hands took to be acked.

lost: a healthy job never acked; double-ack: a job acked more than once; redundant: a job run more
than once, each extra run explained by a fault injected into the process that ran it (killed,
stopped, its MySQL session killed, a server-wide restart); unexpected: anything else (an ack or a
run of a job never enqueued, a redundant run with no fault to explain it). `explain` is shared with
the re-scan checker (tests/chaos/rescan_checker.py).
"""

from __future__ import annotations

import bisect
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from statistics import median

from tests.chaos.execlog import records


@dataclass(frozen=True)
class Fault:
    at: float  # when injected, on the database's clock (UNIX_TIMESTAMP(NOW(6))) as re-scan acks are
    kind: str  # sigkill, sigstop, redis_restart, redis_flush, mysql_kill, ...
    pid: int | None  # the process it hit (None: a server-wide fault)


@dataclass
class Verdict:
    expected: int
    acked: int
    lost: list[int] = field(default_factory=list)
    double_ack: list[int] = field(default_factory=list)
    redundant: dict[int, str] = field(default_factory=dict)  # n -> the fault that explains it
    unexpected: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not (self.lost or self.double_ack or self.unexpected)

    def summary(self) -> str:
        causes = Counter(self.redundant.values())
        return (
            f"expected {self.expected:,}, acked {self.acked:,}, lost {len(self.lost)}, "
            f"double-ack {len(self.double_ack)}, redundant {len(self.redundant)} "
            f"({', '.join(f'{k}: {v}' for k, v in sorted(causes.items())) or 'none'}), "
            f"unexpected {len(self.unexpected)}"
        )


def read_executions(path: Path) -> dict[int, list[int]]:
    runs: dict[int, list[int]] = defaultdict(list)
    for n, pid in records(path):
        runs[int(n)].append(int(pid))
    return runs


# Faults that can make a process's run be repeated elsewhere, by the process they hit.
# "died": a worker a poison job (or a hung batch's timeout) took down, restarted by the supervisor.
_PER_PROCESS = {"sigkill", "sigstop", "sigstop_in_ack", "mysql_kill", "died"}
# Faults that break every process's MySQL session at once: they may explain a rerun by anyone.
_SERVER_WIDE = {"mariadb_restart"}


@dataclass(frozen=True)
class Blame:
    """Which process each injected fault hit, for explaining runs whose work was repeated."""

    hit: dict[int, str]  # pid -> the per-process fault that hit it
    server_wide: str | None  # a fault that broke every process's session, if any

    @classmethod
    def of(cls, faults: Sequence[Fault]) -> Blame:
        hit = {f.pid: f.kind for f in faults if f.kind in _PER_PROCESS and f.pid is not None}
        return cls(hit, next((f.kind for f in faults if f.kind in _SERVER_WIDE), None))

    def explain(self, pids: Sequence[int], spare: int) -> list[str] | None:
        """The faults explaining `spare` of these runs (by pid, one per run) not having produced
        the ack, or None when they cannot: a run only counts for the fault that hit its process."""
        causes = [self.hit[p] for p in pids if p in self.hit]
        if self.server_wide is not None:
            causes += [self.server_wide] * max(0, spare - len(causes))
        return causes if len(causes) >= spare else None


def classify(
    expected: set[int],
    poison: set[int],
    executions: dict[int, list[int]],
    acks: dict[int, int],
    faults: list[Fault],
) -> Verdict:
    """`acks`: n -> how many acks committed; `faults`: everything injected during the run."""
    v = Verdict(expected=len(expected), acked=sum(1 for n in expected if acks.get(n)))
    blame = Blame.of(faults)
    for n in sorted(expected):
        count = acks.get(n, 0)
        if count == 0:
            v.lost.append(n)
        elif count > 1:
            v.double_ack.append(n)
    for n, pids in executions.items():
        if n not in expected and n not in poison:
            v.unexpected.append(f"job {n} ran but was never enqueued")
            continue
        if n in poison or len(pids) <= 1:
            continue
        # All runs but one (the acked one, which may be any of them) need a cause.
        causes = blame.explain(pids, len(pids) - 1)
        if causes:
            v.redundant[n] = causes[0]
        else:
            v.unexpected.append(f"job {n} ran {len(pids)} times (pids {pids}); faults do not explain it")
    for n in acks:
        if n not in expected:
            v.unexpected.append(f"job {n} acked but never enqueued as healthy")
    return v


# ---------------------------------------------------------------- recovery of held work


@dataclass(frozen=True)
class Holding:
    """The units (job ids, or message ids of a cluster group) one worker held when `fault` hit."""

    fault: Fault
    source: str
    units: frozenset[int]
    since: float  # measured from here: the fault, or its end for one that lasts (a server down)


@dataclass
class WorkRecovery:
    """Per Holding, the seconds from its `since` until every unit it held that was not acked before
    the fault had been acked (None: one never was)."""

    results: list[tuple[Holding, float | None]]

    def by_kind(self) -> dict[tuple[str, str], list[float | None]]:
        """(fault kind, source) -> the recoveries measured for it."""
        out: dict[tuple[str, str], list[float | None]] = defaultdict(list)
        for holding, seconds in self.results:
            out[(holding.fault.kind, holding.source)].append(seconds)
        return dict(out)

    def worst(self) -> dict[tuple[str, str], float | None]:
        return {
            key: None if None in values else max(v for v in values if v is not None)
            for key, values in self.by_kind().items()
        }

    def medians(self) -> dict[tuple[str, str], float]:
        done = {key: [v for v in values if v is not None] for key, values in self.by_kind().items()}
        return {key: median(values) for key, values in done.items() if values}

    def lines(self) -> list[str]:
        kinds, medians = self.by_kind(), self.medians()
        return [
            f"{kind} ({source}, {len(kinds[key])}): median {_seconds(medians.get(key), '-')}, "
            f"worst {_seconds(worst, 'never')}"
            for key, worst in sorted(self.worst().items())
            for kind, source in [key]
        ]


def _seconds(value: float | None, missing: str) -> str:
    return missing if value is None else f"{value:.1f}s"


def work_recovery(
    holdings: Sequence[Holding], acked_at: Mapping[str, Mapping[int, list[float]]]
) -> WorkRecovery:
    """`acked_at`: source -> unit -> the sorted times of its acks (the database's clock, as faults').
    Units acked before the fault are left out; a holding with none left is not measured."""
    results: list[tuple[Holding, float | None]] = []
    for h in holdings:
        times = acked_at.get(h.source, {})
        waiting = [u for u in h.units if not (times.get(u) and times[u][0] < h.fault.at)]
        if waiting:
            results.append((h, _latest_first_ack(times, waiting, h.fault.at, h.since)))
    return WorkRecovery(results)


def _latest_first_ack(
    times: Mapping[int, list[float]], units: Iterable[int], after: float, since: float
) -> float | None:
    latest = since
    for u in units:
        at = times.get(u, [])
        i = bisect.bisect_left(at, after)
        if i == len(at):
            return None
        latest = max(latest, at[i])
    return latest - since
