"""Who is to blame when leased work is interrupted (pure): a unit whose worker died is counted and
run again, dead after its last interruption alone, or excused (run again, not counted) when the
event was fleet-wide and so no job's doing."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from .policy import blame_interruptions

# Workers whose leases run out in one interruption pass from which on the event is fleet-wide: a
# poison job kills the one process it runs in, while a MariaDB restart or a read lock fences every
# worker (EXIT_FENCED) and ends every lease at once.
FLEET_WIDE_WORKERS = 2


@dataclass(frozen=True)
class Verdict:
    """Ids of one interruption pass, each in exactly one list."""

    again: list[int] = field(default_factory=list)  # pending again, the interruption counted
    excused: list[int] = field(default_factory=list)  # pending again, not counted: not its fault
    dead: list[int] = field(default_factory=list)  # ran alone, at its max_interruptions-th


def fleet_wide(workers: Sequence[str]) -> bool:
    """Whether the work of one pass was started by FLEET_WIDE_WORKERS or more distinct processes."""
    return len(set(workers)) >= FLEET_WIDE_WORKERS


def judge_interruptions(
    running: Sequence[tuple[int, int, object, str]], max_interruptions: int, *, fenced: bool = False
) -> Verdict:
    """One pass of interrupted work -> its Verdict.

    `running`: (id, interruptions so far, start, worker) of the units whose lease ran out in this
    pass (the sweep), or of one exited worker's (its supervisor); `fenced`: that worker exited
    because it fenced itself (EXIT_FENCED: it could not keep its leases in MySQL).

    The whole pass is excused, counting no interruption and dead-lettering nothing, when its work
    ran on FLEET_WIDE_WORKERS or more workers, or on a worker that fenced itself: the database went
    away from under everyone, and counting it would shrink healthy jobs' groups until an unrelated
    kill dead-letters one running alone. Otherwise each unit is blamed by its start
    (shared.policy.blame_interruptions): counted, and dead only when it ran alone for the
    max_interruptions-th time. A poison job kills its own worker only, so its passes are never
    fleet-wide and it dies exactly as before; if another worker happens to die in the same pass it
    is excused that once and blamed the next time.
    """
    ids = [i for i, _, _, _ in running]
    if fenced or fleet_wide([w for _, _, _, w in running]):
        return Verdict(excused=ids)
    again, dead = blame_interruptions([(i, n, start) for i, n, start, _ in running], max_interruptions)
    return Verdict(again=again, dead=dead)
