"""What the roles program against on the Redis side: the Queue protocol (the operations they use) and
the errors it raises, duecast's own. No Redis here: ReadyQueue (queue.py) implements it, and only
wiring builds one (shared/process/runtime.py); tests/unit/queue_contract.py proves the implementation.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol, runtime_checkable

from ..entries import Entry
from ..errors import DuecastError, TransientFailure
from .keys import Keys

# The counters' and quarantine's label for what no source owns: the dispatcher's wake-up list, a
# dead worker's hold record that names no source (dispatcher/redelivery.py).
NO_SOURCE = "-"


class QueueError(DuecastError):
    """Redis failed or refused a queue operation (out of memory, a refused command, credentials).
    `str()` is redis-py's class and message; `__cause__` is redis-py's error itself."""


class QueueUnavailable(QueueError, TransientFailure):
    """Redis could not be reached or did not answer in time (down, restarting, a cluster slot with no
    node): the operation may or may not have run. The loop backs off and runs the tick again."""


@runtime_checkable
class Queue(Protocol):
    """The ready lists, the workers' holds, the quarantine and the shared counters, as the roles see
    them. Every method raises QueueError (QueueUnavailable when Redis is out of reach), never a
    redis-py error; `held_by` also raises entries.BadHold for a record that does not parse."""

    keys: Keys  # the key names, for log lines that say where something went

    def ping(self) -> None: ...  # a round trip: does Redis answer?
    def close(self) -> None: ...  # the client's connections; the next call opens one again
    def push(self, source: str, entries: Sequence[Entry]) -> None: ...
    def push_raw(self, source: str, items: Sequence[bytes]) -> None: ...  # a handed-back batch, as popped
    # Work coming back (handed back, redelivered): ahead of the backlog, popped next, in this order.
    def push_front(self, source: str, items: Sequence[bytes]) -> None: ...
    def length(self, source: str) -> int: ...
    def pop(self, sources: Sequence[str], count: int, timeout_s: float) -> tuple[str, list[bytes]] | None: ...
    def pop_held(
        self, worker: str, sources: Sequence[str], count: int | Sequence[int], timeout_s: float
    ) -> tuple[str, list[bytes]] | None: ...  # pop, and record the batch as `worker`'s hold
    # The hold goes; `started` (batch number -> hold record, b"": over) is written to the worker's
    # started hash (`replace`: the hash becomes its non-empty records), in one MULTI.
    def release_hold(
        self, worker: str, started: Mapping[bytes, bytes] | None = None, *, replace: bool = False
    ) -> None: ...
    def held_by(self, worker: str) -> tuple[str, list[bytes]] | None: ...
    # Batches of rows that record no worker in MySQL (re-scan rows, spans), started, maybe over.
    def started_by(self, worker: str) -> list[tuple[str, list[bytes]]]: ...
    def forget_started(self, worker: str) -> None: ...
    def data_lost(self) -> bool: ...  # the epoch canary was missing: every entry may be gone
    def eviction_policy(self) -> str | None: ...
    def wait_wake(self, timeout_s: float) -> bool: ...  # an enqueuer's wake-up, or the timeout
    def quarantine(self, source: str, items: Sequence[tuple[bytes, str]]) -> None: ...
    def add_stats(self, source: str, counts: Mapping[str, int]) -> None: ...
    def stats(self, source: str) -> dict[str, int]: ...
