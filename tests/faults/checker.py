"""Reads the fault tier's independent execution log and classifies what happened to each row.

The log (see tests/faults/app.py) has one line "source id attempt pid" per execution. Verdicts:
lost rows, duplicate executions of one (id, attempt), and redundant executions (one id run under
more than one attempt), which a test must explain by the fault it injected.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Execution:
    source: str
    id: int
    attempt: int
    pid: int


def read_log(path: Path) -> list[Execution]:
    """Every execution, in log order. Only whole lines count: a writer killed mid-line wrote none."""
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        source, id_, attempt, pid = line.split()
        out.append(Execution(source, int(id_), int(attempt), int(pid)))
    return out


@dataclass(frozen=True)
class Verdict:
    executions: tuple[Execution, ...]
    lost: frozenset[int]  # expected ids never executed, or still in the table
    duplicates: dict[tuple[int, int], int]  # (id, attempt) -> executions, where more than one
    redundant: dict[int, tuple[int, ...]]  # id -> attempts executed, where more than one attempt
    unexpected: frozenset[int]  # ids executed that the test never created
    # Re-scan rows whose recorded outcome (the attempt the handler saw) is not their latest
    # executed attempt: id -> (recorded, latest). A late ack from an old attempt shows here.
    wrong_outcome: dict[int, tuple[int | None, int]]

    def attempts(self, id_: int) -> list[int]:
        """The attempts `id_` was executed with, in log order."""
        return [e.attempt for e in self.executions if e.id == id_]

    def ids_by(self, pid: int) -> set[int]:
        return {e.id for e in self.executions if e.pid == pid}


def classify(
    executions: Iterable[Execution],
    source: str,
    expected: Iterable[int],
    pending: Iterable[int] = (),
    outcomes: Mapping[int, int | None] | None = None,
) -> Verdict:
    """Judge the executions of `source` against the ids a test created (`expected`).

    `pending`: ids whose work is not done at the end (a one-off row still in the table, a re-scan
    row not acked): lost even when executed, since no ack landed. `outcomes`: for a re-scan source,
    id -> the attempt its row records as the one that handled it.
    """
    runs = tuple(e for e in executions if e.source == source)
    expected_ids = set(expected)
    executed = {e.id for e in runs}
    per_attempt = Counter((e.id, e.attempt) for e in runs)
    attempts: dict[int, set[int]] = defaultdict(set)
    for e in runs:
        attempts[e.id].add(e.attempt)
    return Verdict(
        executions=runs,
        lost=frozenset((expected_ids - executed) | (expected_ids & set(pending))),
        duplicates={key: n for key, n in sorted(per_attempt.items()) if n > 1},
        redundant={i: tuple(sorted(a)) for i, a in sorted(attempts.items()) if len(a) > 1},
        unexpected=frozenset(executed - expected_ids),
        wrong_outcome={
            i: (recorded, max(attempts[i]))
            for i, recorded in sorted((outcomes or {}).items())
            if i in attempts and recorded != max(attempts[i])
        },
    )
