"""What the jobs' claims change, read by scenarios that must see none happen (Redis down) or count
what was listed: the runs table's AUTO_INCREMENT, runs' attempts, the dispatch cursors."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from duecast.shared.entries import decode_entry
from tests.chaos.harness import Chaos

Claims = tuple[int, dict[int, int], list[tuple[Any, ...]]]


def claims(chaos: Chaos) -> Claims:
    """What every claim of jobs changes: the runs table's AUTO_INCREMENT (a new run), each run's
    attempt (a run dispatched again) and the dispatch cursors (jobs read past them)."""
    runs = chaos.settings.jobs.runs_table
    (auto,) = chaos.query(
        "SELECT AUTO_INCREMENT FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() "
        "AND TABLE_NAME = %s",
        (runs,),
    )[0]
    attempts = {int(i): int(a) for i, a in chaos.query(f"SELECT id, dc_attempt FROM `{runs}`")}
    cursors = chaos.query(f"SELECT * FROM `{chaos.settings.jobs.cursors_table}` ORDER BY queue, priority")
    return int(auto), attempts, cursors


def claims_since(chaos: Chaos, before: Claims) -> list[str]:
    """The claims made since `claims()` returned `before` (a finished run's row goes: no claim)."""
    auto, attempts, cursors = claims(chaos)
    made = [f"runs made: {before[0]} -> {auto}"] if auto != before[0] else []
    again = [f"run {i} dispatched again" for i, a in attempts.items() if a != before[1].get(i, a)]
    moved = ["a cursor moved"] if cursors != before[2] else []
    return made + again + moved


def jobs_listed(chaos: Chaos, entries: Sequence[bytes | str]) -> int:
    """The jobs the runs of these ready-list entries hold."""
    ids = [decode_entry(e if isinstance(e, bytes) else e.encode()).id for e in entries]
    if not ids:
        return 0
    runs = chaos.settings.jobs.runs_table
    found = chaos.query(f"SELECT COALESCE(SUM(jobs), 0) FROM `{runs}` WHERE id IN %s", (tuple(ids),))
    return int(found[0][0])
