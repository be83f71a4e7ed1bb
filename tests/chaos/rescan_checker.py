"""Classify a chaos run's re-scan checks from their execution log, the acks the triggers recorded and
the fault log. Pure: nothing here reads the database or a clock (read_rescan_log reads the log).

Each execution of a (source, id, attempt) either made the one ack applied for that attempt, or is
**redundant**: its work was repeated, and a fault that hit the process running it must explain it
(`Blame`, shared with the jobs checker). **lost**: a row whose check was never applied again after
the faults ended. **double-ack**: two acks applied for one (unit, attempt), the unit being the row
(row mode) or its span (range mode). **unexpected**: anything else, such as an unexplained
redundant run, an ack applied to a row that was not started (RUNNING) or that no execution made, or a run
of a row that is not in the table.
"""

from __future__ import annotations

import bisect
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from statistics import median

from tests.chaos.checker import Blame, Fault
from tests.chaos.execlog import records

RunKey = tuple[str, int, int]  # (source, row id, attempt)


@dataclass(frozen=True)
class RescanSource:
    name: str
    ids: range  # the table's rows, the same all run long
    unit_size: int = 1  # what one ack covers: a row, or in range mode a span of range_size ids

    def unit(self, id_: int) -> int:
        return id_ // self.unit_size

    def rows_by_unit(self) -> dict[int, list[int]]:
        out: dict[int, list[int]] = defaultdict(list)
        for i in self.ids:
            out[self.unit(i)].append(i)
        return out


@dataclass(frozen=True)
class Check:
    """One ack applied, as the source's trigger recorded it inside the ack's own transaction."""

    source: str
    unit: int
    attempt: int  # the fence's: the row's (or span's) dc_attempt before the ack
    was_started: bool  # the fence's state before the ack: RUNNING
    by_attempt: int | None  # row mode: the attempt the handler saw (it writes it with its ack)
    pid: int | None  # row mode: the process whose handler made the ack
    at: float  # the database's clock


def read_rescan_log(path: Path) -> dict[RunKey, list[int]]:
    """(source, id, attempt) -> the pids that executed it, in log order."""
    runs: dict[RunKey, list[int]] = defaultdict(list)
    for source, id_, attempt, pid, *_ in records(path):
        runs[(source, int(id_), int(attempt))].append(int(pid))
    return runs


def read_rescan_starts(path: Path, source: str) -> list[float]:
    """When each check of `source` started (time.time() in its handler), in log order."""
    return [float(fields[4]) for fields in records(path) if fields[0] == source and len(fields) == 5]


@dataclass
class RescanVerdict:
    checks: Counter[str]  # acks applied, per source
    runs: int  # executions in the log
    lost: list[tuple[str, int]] = field(default_factory=list)  # (source, id)
    double_ack: list[RunKey] = field(default_factory=list)  # (source, unit, attempt)
    redundant: dict[RunKey, str] = field(default_factory=dict)  # -> the fault explaining it
    repeated: int = 0  # redundant keys run more than once under one attempt (the rest: never acked)
    unexpected: list[str] = field(default_factory=list)
    # Per source, per fault: seconds until every unit had been checked after it (None: never).
    recovery: dict[str, list[tuple[Fault, float | None]]] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not (self.lost or self.double_ack or self.unexpected)

    def worst_recovery(self) -> dict[str, float | None]:
        """Per fault kind, the slowest recovery over every source (None: one never recovered)."""
        out: dict[str, float | None] = {}
        for per_fault in self.recovery.values():
            for fault, seconds in per_fault:
                prev = out.get(fault.kind, 0.0)
                out[fault.kind] = None if seconds is None or prev is None else max(prev, seconds)
        return out

    def median_recovery(self) -> dict[str, float]:
        by_kind: dict[str, list[float]] = defaultdict(list)
        for per_fault in self.recovery.values():
            for fault, seconds in per_fault:
                if seconds is not None:
                    by_kind[fault.kind].append(seconds)
        return {kind: median(values) for kind, values in by_kind.items()}

    def summary(self) -> str:
        checks = ", ".join(f"{name} {n:,}" for name, n in sorted(self.checks.items()))
        return (
            f"re-scan: {sum(self.checks.values()):,} checks ({checks}) from {self.runs:,} row runs, "
            f"lost {len(self.lost)}, double-ack {len(self.double_ack)}, redundant {len(self.redundant)} "
            f"({_counts(Counter(self.redundant.values()))}; "
            f"{_counts(Counter(source for source, _, _ in self.redundant))}; "
            f"{self.repeated} under one attempt), unexpected {len(self.unexpected)}"
        )


def _counts(counts: Counter[str]) -> str:
    return ", ".join(f"{k}: {v}" for k, v in sorted(counts.items())) or "none"


def classify_rescan(
    sources: Sequence[RescanSource],
    runs: Mapping[RunKey, list[int]],
    checks: Sequence[Check],
    faults: Sequence[Fault],
    faults_end: float,
) -> RescanVerdict:
    """`faults_end`: the database time once the last fault was over; every row must be checked after."""
    by_name = {s.name: s for s in sources}
    v = RescanVerdict(checks=Counter(c.source for c in checks), runs=sum(len(p) for p in runs.values()))
    acks = Counter((c.source, c.unit, c.attempt) for c in checks)
    v.double_ack = sorted(k for k, n in acks.items() if n > 1)
    v.unexpected.extend(_bad_checks(by_name, runs, checks))
    acked_by = {(c.source, c.unit, c.attempt): c.pid for c in checks}
    blame = Blame.of(faults)
    for (source, id_, attempt), pids in runs.items():
        src = by_name.get(source)
        if src is None or id_ not in src.ids:
            v.unexpected.append(f"{source} row {id_} ran (attempt {attempt}) but is not in the table")
            continue
        unit = (source, src.unit(id_), attempt)
        left = list(pids)
        spare = len(left) - min(1, acks[unit])
        acked_pid = acked_by.get(unit)
        if acked_pid is not None and acked_pid in left:  # row mode: blame only the runs that did not ack
            left.remove(acked_pid)
        if spare == 0:
            continue
        causes = blame.explain(left, spare)
        if causes is None:
            state = "acked" if acks[unit] else "never acked"
            v.unexpected.append(f"{source} row {id_} attempt {attempt}: runs by {pids}, {state}, unexplained")
            continue
        v.redundant[(source, id_, attempt)] = causes[0]
        v.repeated += len(pids) > 1
    times = _check_times(checks)
    for src in sources:
        units = src.rows_by_unit()
        last = {u: times[(src.name, u)][-1] for u in units if times.get((src.name, u))}
        v.lost.extend(
            (src.name, i) for u, ids in units.items() if last.get(u, -1.0) < faults_end for i in ids
        )
        v.recovery[src.name] = [(f, _recovery_s(times, src.name, units, f.at)) for f in faults]
    return v


def _bad_checks(
    sources: Mapping[str, RescanSource], runs: Mapping[RunKey, list[int]], checks: Iterable[Check]
) -> Iterable[str]:
    """Acks that no fenced ack of an execution could have made."""
    rows_by_unit = {name: src.rows_by_unit() for name, src in sources.items()}
    for c in checks:
        where = f"{c.source} unit {c.unit} attempt {c.attempt}"
        if c.source not in sources or c.unit not in rows_by_unit[c.source]:
            yield f"{where}: acked, but no such row"
            continue
        if not c.was_started:
            yield f"{where}: acked while not started"
        if c.by_attempt is not None and c.by_attempt != c.attempt:
            yield f"{where}: the ack carried the handler's attempt {c.by_attempt}"
        missing = [i for i in rows_by_unit[c.source][c.unit] if (c.source, i, c.attempt) not in runs]
        if missing:
            yield f"{where}: acked, but rows {missing[:5]} never ran under that attempt"
        elif c.pid is not None and c.pid not in runs[(c.source, c.unit, c.attempt)]:  # row mode: unit = id
            yield f"{where}: acked by pid {c.pid}, which never ran it"


def _check_times(checks: Iterable[Check]) -> dict[tuple[str, int], list[float]]:
    times: dict[tuple[str, int], list[float]] = defaultdict(list)
    for c in checks:
        times[(c.source, c.unit)].append(c.at)
    for values in times.values():
        values.sort()
    return times


def _recovery_s(
    times: Mapping[tuple[str, int], list[float]], source: str, units: Iterable[int], since: float
) -> float | None:
    """Seconds from `since` until every unit had a check applied at or after it; None if one had not."""
    latest = since
    for u in units:
        at = times.get((source, u), [])
        i = bisect.bisect_left(at, since)
        if i == len(at):
            return None
        latest = max(latest, at[i])
    return latest - since
