"""A dead worker's hold requeued: the entries of its last pop it never started go back to pending,
fenced on their attempt. The one operation behind redelivery's "held" cause and the supervisor's
hand-back; each caller keeps its own policy (a record that does not parse, a failure) and pacing.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from ..entries import BadEntry, Entry, decode_entry
from .protocol import Store


class Holds(Protocol):
    """Where workers' holds are recorded (the ready queue's inflight records) and requeues counted."""

    def held_by(self, worker: str) -> tuple[str, list[bytes]] | None: ...
    def add_stats(self, source: str, counts: Mapping[str, int]) -> None: ...


@dataclass(frozen=True)
class Requeued:
    source: str  # the source the hold was of
    rows: int  # its rows pending again (0: stale entries only, or none parsed)


def hold_entries(raws: Sequence[bytes]) -> list[Entry]:
    """The entries of a hold record; one that does not parse is skipped (the record is ours, but
    Redis is not trusted)."""
    out = []
    for raw in raws:
        try:
            out.append(decode_entry(raw))
        except BadEntry:
            continue
    return out


def requeue_hold(holds: Holds, worker: str, store_of: Callable[[str], Store | None]) -> Requeued | None:
    """Requeue what `worker` (dead: silent, or seen to exit) held, through its source's store
    (`store_of`; None: a source this caller does not serve, left alone) with `requeue_held`, fenced
    on each entry's attempt, so a row started or claimed again since is untouched. Counts the rows
    (`requeued`). None when it held nothing (or nothing of ours). A record that does not parse
    raises BadHold: what to do with it is the caller's policy."""
    held = holds.held_by(worker)
    if held is None:
        return None
    source, raws = held
    store = store_of(source)
    if store is None:
        return None
    entries = hold_entries(raws)
    n = store.requeue_held(entries) if entries else 0
    if n:
        holds.add_stats(source, {"requeued": n})
    return Requeued(source, n)
