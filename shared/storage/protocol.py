"""What the roles program against, whatever the kind of source: the Store and WorkBatch protocols,
and the values they return. No SQL here; the stores implementing them are the storage layer's.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar, runtime_checkable

from ..acks import Ack, Row
from ..entries import Entry
from ..errors import DuecastError
from ..settings import SourceSettings
from .units import CommitUnknown

B = TypeVar("B")


@dataclass(frozen=True)
class AckCounts:
    acked: int
    stale: int  # acks whose (id, attempt, state) no longer matched: counted and dropped
    refused: int = 0  # acks whose values the database refused: those rows failed

    def __add__(self, other: AckCounts) -> AckCounts:
        return AckCounts(self.acked + other.acked, self.stale + other.stale, self.refused + other.refused)


NO_ACKS = AckCounts(0, 0)


class StaleAck(DuecastError, RuntimeError):
    """An ack found rows no longer matching their fence where that cannot be dropped row by row."""

    def __init__(self, count: int, why: str) -> None:
        super().__init__(f"{count} stale: {why}")
        self.count = count


class StartUnknown(CommitUnknown, Generic[B]):
    """A worker's start whose COMMIT got no answer (its session killed, the server gone): it may have
    started its rows. `resume()`, once the server answers, settles it under the start's own fence
    (each unit's attempt, and the time that start wrote, read in its transaction): the batch of what
    it did start, to run under that attempt (never twice, never left for its lease to run out), or,
    when it did not commit, the batch of a start made again. Its caller retries `resume`, not the
    start, until it returns."""

    def __init__(self, cause: CommitUnknown, resume: Callable[[], B]) -> None:
        super().__init__(str(cause), cause.code)
        self.resume = resume


@dataclass(frozen=True)
class SourceStatus:
    due: int  # capped at STATUS_COUNT_CAP
    in_flight: int  # dispatched or started, not yet finished
    oldest_due_age_s: float | None  # None when the table is empty
    unit: str = "rows"  # what due / in_flight count: rows, or ranges in range mode
    fresh_share: float | None = None  # range mode: share of rows checked within period + 1 s
    detail: dict[str, int] | None = None  # job queues: jobs per state (pending, due, scheduled...)


class WorkBatch(Protocol):
    """Work a store started for a worker: committed RUNNING under leases the store keeps until
    close(). No transaction or row lock is open while its handlers run; each ack or fail is a
    short fenced transaction of its own, for any subset of the rows, as they finish. One caller
    at a time: a batch is not shared between threads."""

    rows: list[Row]
    skipped: int  # entries not started: stale, deleted, or held by another worker
    # Entries locked but left to start later, one group at a time after this batch is finished
    # (leased stores: suspects, shared.policy.start_groups); empty for the others.
    later: list[list[Entry]]
    # Its rows' earlier runs were interrupted (leased stores: a group of suspects): the worker runs
    # nothing else beside them, so a death while they run is theirs to be blamed for.
    suspects: bool

    def ack(self, acks: Sequence[tuple[Row, Ack]]) -> AckCounts: ...
    def fail(self, failures: Sequence[tuple[Row, object]]) -> None: ...
    # Finish what waits on time rather than on outcomes (range mode: a span whose last rows
    # straggle); called now and then while rows are in flight.
    def settle(self) -> AckCounts: ...
    def close(self) -> None: ...  # stop keeping leases: every row has been acked or failed


@runtime_checkable
class GivesBack(Protocol):
    """A started batch that can be handed back whole before any of its rows ran (a job queue's runs,
    a row-mode batch)."""

    def give_back(self) -> int: ...  # pending again now, fenced: no attempt used up, no interruption


@runtime_checkable
class SkipsLocked(Protocol):
    """A store whose claims, or a batch whose start, report the rows they passed over because
    another session held their lock (row mode, and range mode's ranges): counted as `locked_skipped`."""

    skipped_locked: int  # in the last claim, or in this batch's start


@runtime_checkable
class NamesSkipped(Protocol):
    """A store whose claims also say which rows they passed over as locked (None: a full claim,
    which did not look), so the dispatcher can tell a lock held across claims from a passing one."""

    @property
    def skipped_ids(self) -> frozenset[int] | None: ...


@runtime_checkable
class StartsUnnamed(Protocol):
    """A store whose started units record no worker in MySQL (row mode's rows, range mode's spans).
    Its worker names each started batch in Redis (Queue.release_hold's record) and its supervisor,
    when the worker exits, hands them back with requeue_started: fenced on (id, attempt) and
    RUNNING, so a unit finished or claimed again since is untouched."""

    def requeue_started(self, entries: Sequence[Entry]) -> int: ...  # RUNNING -> due now; how many


@runtime_checkable
class NamesStarted(Protocol):
    """A started batch that says which units it started, as their (id, attempt): what its worker
    records for a StartsUnnamed store."""

    @property
    def entries(self) -> list[Entry]: ...


@runtime_checkable
class ClaimsRuns(Protocol):
    """A store whose entries are runs of rows (a job queue): its last claim's rows, for the counts."""

    claimed_rows: int


class Store(Protocol):
    """What the roles need from a source's store (row mode: SourceStore; range mode: RangeStore)."""

    @property
    def src(self) -> SourceSettings: ...
    @property
    def id_column(self) -> str: ...  # the business table's key, as in the rows handlers get
    @property
    def rows_per_entry(self) -> int: ...  # 1, or range_size in range mode, run_size for a job queue
    @property
    def claim_weight(
        self,
    ) -> int: ...  # what an entry counts as in claim_batch and high_water: 1, or run_size

    def verify(self) -> None: ...
    def claim_due(self, limit: int) -> list[Entry]: ...
    def start(self, entries: Sequence[Entry], columns: Sequence[str] = ()) -> WorkBatch: ...
    def started(
        self, entries: Sequence[Entry], columns: Sequence[str] = ()
    ) -> AbstractContextManager[WorkBatch]: ...  # start, and close when the block ends
    def group_key(self, ack: Ack) -> Any: ...
    # Redelivery, one method per cause (dispatcher/redelivery.py runs them; shared/policy.py: CAUSES).
    def requeue_expired(self, visibility_timeout_s: float, limit: int) -> int: ...  # DISPATCHED too long
    # Redis lost its entries: every unstarted one (dispatched at least dispatched_s ago), now.
    def requeue_lost(self, limit: int, dispatched_s: float = 0.0) -> int: ...
    def requeue_interrupted(self, limit: int) -> int: ...  # a started lease ran out: its worker died
    def requeue_held(self, entries: Sequence[Entry]) -> int: ...  # popped by a worker now dead
    def release_unpushed(self, entries: Sequence[Entry]) -> int: ...  # claimed, push refused
    def reset_dispatched(self) -> int: ...
    def status(self) -> SourceStatus: ...
    def close(self) -> None: ...  # the role is done with it: its session goes now, not at garbage collection
