"""One leased lifecycle, a job queue's or a cluster group's: a committed start whose leases are kept
while handlers run, a late start given back, requeues by cause (expired, lost, interrupted, held,
unpushed), interruptions blamed, and fenced finishes. Written once here; what a unit of work is (a
row, or a run of jobs) is a pair of classes (row_units.py, run_units.py), what a kind decides (its
claim, retry delays, status) is jobs.py's or groups.py's.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import partial
from typing import Any

from ...acks import Ack, Row, check_times
from ...blame_policy import judge_interruptions
from ...entries import Entry
from ...limits import MAX_DELAY_S, storable_text
from ...settings import MySQLSettings, SourceSettings
from ...telemetry import observe
from ..db import Database
from ..protocol import StartUnknown
from ..source_store import SourceStatus, _us
from ..units import MYSQL_ERRORS, CommitUnknown, Cursor
from ..worker_registry import worker_name
from .batch import LeasedBatch, error_text, finish_group
from .keeper import Extended, LeaseKeeper
from .scope import Naming

INTERRUPTED = "interrupted: its worker stopped (killed, crashed or stalled) before finishing it"
# Work whose lease ran out, or whose worker exited: (id, interruptions so far, what it ran with: a
# row's start, or a job's run; the worker that started it), as shared.blame_policy takes it.
Interrupted = tuple[int, int, Any, str]
EXCUSED = " (not counted: a fleet-wide interruption, or its worker fenced itself)"


@dataclass
class Started:
    """What a start's transaction did, before the lifecycle checks it was in time."""

    rows: list[Row]  # as their handlers get them
    units: list[Entry]  # the units marked RUNNING (rows, or runs)
    later: list[list[Entry]]  # locked, left DISPATCHED, each group to start once this one is over
    skipped: int  # entries not started (stale, deleted, held elsewhere)
    since: float  # time.monotonic() before the statement that set the leases
    run_of: dict[int, int] = field(default_factory=dict)  # per-run units: job id -> its run
    at: Any = None  # the start's own NOW(6), written as its units' started_at (source.START_TIME)


class LeasedStore(ABC):
    """Leased work of one source, as a Store the dispatcher, sweeper and worker drive."""

    rows_per_entry = 1
    claim_weight = 1
    # Of the last claim's entries, how many (the first ones) are work coming back: given back,
    # requeued, retried or interrupted. The dispatcher pushes those ahead of the backlog.
    returning = 0

    def __init__(
        self,
        db: Database,
        src: SourceSettings,
        naming: Naming,
        mysql: MySQLSettings,
        *,
        lease_s: float,
        max_interruptions: int,
        what: str,
        timeout_s: float | None = None,
        max_delay_s: float = MAX_DELAY_S,
    ) -> None:
        self.db = db
        self.max_delay_s = max_delay_s  # jobs.max_delay_s: how far ahead an Ack may put work
        self.src = src
        self.scope = naming
        self.max_interruptions = max_interruptions
        self.worker = worker_name()
        self._lease_us = _us(lease_s)
        self._what = what  # the leases' units in log lines: "job runs of jobs.default"
        self._leases = LeaseKeeper(self.extend_leases, lease_s, mysql, what, timeout_s=timeout_s)

    @property
    def id_column(self) -> str:
        return self.scope.key

    @abstractmethod
    def verify(self) -> None: ...

    @abstractmethod
    def status(self) -> SourceStatus: ...

    @abstractmethod
    def claim_due(self, limit: int) -> list[Entry]:
        """Due pending work -> DISPATCHED under a new attempt; committed on return."""

    # -- start -----------------------------------------------------------------------------------

    @contextmanager
    def started(self, entries: Sequence[Entry], columns: Sequence[str] = ()) -> Iterator[LeasedBatch]:
        """`start`, then `close` when the block ends, however it ends."""
        batch = self.start(entries, columns)
        try:
            yield batch
        finally:
            batch.close()

    def start(self, entries: Sequence[Entry], columns: Sequence[str] = ()) -> LeasedBatch:
        """DISPATCHED -> RUNNING for the first group of the entries still current, committed on
        return; the other groups stay DISPATCHED, in `batch.later`, for the worker to start one by
        one once this one is finished (shared.policy.start_groups: clean work together, suspects in
        groups that shrink with each death, so a poison job is found and healthy ones run).

        Until `batch.close()` a lease keeper extends their leases, so a long run is not taken for an
        interrupted one. Stale, deleted or elsewhere-held entries are left out (`skipped`).
        """
        if not entries:
            raise ValueError("start() needs at least one entry")
        began = Started([], [], [], len(entries), time.monotonic())
        try:
            self._start_units(entries, began)
        except CommitUnknown as exc:
            if not began.units:
                raise  # it wrote nothing: running it again is all there is to do
            raise StartUnknown(exc, partial(self._resume, entries, began)) from exc
        return self._begun(began)

    def _resume(self, entries: Sequence[Entry], began: Started) -> LeasedBatch:
        """A start whose COMMIT got no answer (StartUnknown), settled: if its units are RUNNING under
        their attempt, by this worker since its time, it committed, and they run now under that
        attempt (they wait for no lease and count no interruption); found none, it did not, and the
        entries are started again. Found some only (the others taken since: their leases ran out
        meanwhile, or an operator's command), none runs and the rest are due again now."""
        with self.db.transaction(check=True) as cur:
            mine = self._started_by(cur, began)
        s, n = self.scope, len(began.units)
        s.log.warning(
            "a start of %d %s got no answer to its COMMIT; it had %s",
            n,
            self._what,
            f"committed: running them under their attempt ({len(mine)} of {n} still its own)"
            if mine
            else "not: starting again",
            extra={"event": f"{s.noun}.start_settled", "source": self.src.name, "count": len(mine)},
        )
        if not mine:
            return self.start(entries)
        if mine != {e.id for e in began.units}:
            return self._batch(began, self._give_back_late(began, time.monotonic() - began.since))
        return self._begun(began)

    def _begun(self, began: Started) -> LeasedBatch:
        """The batch of what a start committed, its leases kept; or of nothing, when the commit came
        too late to run it (given back: due again now)."""
        rows = began.rows
        if rows and not self._leases.in_time(began.since):
            rows = self._give_back_late(began, time.monotonic() - began.since)
        elif began.units and not rows:
            self._drop_empty(began.units)
        batch = self._batch(began, rows)
        if rows:
            batch.keep(self._leases.holding(batch.entries, began.since))
        return batch

    def _give_back_late(self, began: Started, took_s: float) -> list[Row]:
        """A start whose commit stalled so long that the leases may run out (or have) before the
        keeper confirms one: run nothing (another worker may take the work the moment a lease ends),
        and make the work due again now, fenced, as Ack.retry() does (no attempt used up). If even
        that fails, the leases run out and the sweeper takes them."""
        s, n = self.scope, len(began.rows)
        s.log.warning(
            "starting %d %ss of %s took %.1fs of their %gs lease; running none of them and making them "
            "due again, so that none runs once its lease may have run out",
            n,
            s.noun,
            s.place,
            took_s,
            self._lease_us / 1e6,
            extra={"event": f"{s.noun}.start_too_late", "source": self.src.name, "count": n},
        )
        try:
            with self.db.transaction() as cur:
                self._give_back(cur, began)
        except MYSQL_ERRORS as exc:
            s.log.warning("could not give back the late-started %s: %s", self._what, exc)
        return []

    def extend_leases(self, db: Database, entries: Sequence[Entry]) -> Extended:
        """Extend the leases still ours that no other session has locked; say which are lost.

        Runs on the lease keeper's own connection and never waits for a lock (SKIP LOCKED; a plain
        read): a unit locked elsewhere, by this worker's own ack most often, is neither kept nor lost.
        """
        with db.transaction() as cur:
            return self._renew(cur, entries)

    def group_key(self, ack: Ack) -> Any:
        """How the ack is finished (finish_group); a bad Ack raises ValueError, and its row fails alone."""
        key = finish_group(ack, self.scope.handler)
        check_times(ack, self.max_delay_s)
        return key

    # -- requeue, by cause -------------------------------------------------------------------------

    def requeue_expired(self, visibility_timeout_s: float, limit: int) -> int:
        """Lost entries (dispatched, never started) -> pending; interrupted work -> pending or dead."""
        older = self._requeue_older(visibility_timeout_s)
        return older + self._requeue_dispatched(visibility_timeout_s, limit) + self.interrupt_expired(limit)

    def requeue_lost(self, limit: int, dispatched_s: float = 0.0) -> int:
        """Everything DISPATCHED (at least `dispatched_s` ago) no worker started -> pending now: Redis
        lost its entries. RUNNING work is left to its leases: its workers hold it, entry or not."""
        return self._requeue_dispatched(dispatched_s, limit)

    def requeue_interrupted(self, limit: int) -> int:
        return self.interrupt_expired(limit)

    def requeue_held(self, entries: Sequence[Entry]) -> int:
        """A dead worker's popped work, never started -> pending now (fenced, as release_unpushed)."""
        return self.release_unpushed(entries)

    def _requeue_older(self, visibility_timeout_s: float) -> int:
        """What an older duecast left in flight in another shape (none here; a job queue's own rows)."""
        return 0

    def interrupt_expired(self, limit: int) -> int:
        """RUNNING work whose lease ran out: its worker died. Each is an interruption; only work that
        ran alone can be dead for it, and a pass over several workers' work counts none
        (shared.blame_policy.judge_interruptions)."""
        with self.db.transaction() as cur:
            found, dead = self._interrupt_expired(cur, limit)
        observe.count(self.src.name, "dead", dead)
        return found

    def interrupt_worker(self, worker: str, why: str, limit: int = 10_000, *, fenced: bool = False) -> int:
        """RUNNING work started by `worker`, a process its supervisor saw exit (waitpid: nothing of
        it can still run), -> interrupted now, as if its leases had run out: each an interruption
        (`why` is its last_error), blamed as the sweep blames; excused (not counted) when it
        `fenced` itself (it lost MySQL, not its job's doing). Never for a process that may still
        run (a stalled one keeps its leases). Returns the rows (jobs) interrupted."""
        total = 0
        while True:
            found, more = self.interrupt_worker_batch(worker, why, limit, fenced=fenced)
            total += found
            if not more:
                return total

    def interrupt_worker_batch(
        self, worker: str, why: str, limit: int, *, fenced: bool = False
    ) -> tuple[int, bool]:
        """One transaction of interrupt_worker, over at most `limit` units (rows, or runs): (rows or
        jobs interrupted, whether more may be left). The supervisor retries each on its own."""
        with self.db.transaction() as cur:
            found, dead, more = self._interrupt_worker(cur, worker, why, limit, fenced)
        observe.count(self.src.name, "dead", dead)
        return found, more

    def _blame(self, cur: Cursor, found: Sequence[Interrupted], why: str, fenced: bool = False) -> list[int]:
        """Interrupted work (locked) -> pending again (counted or excused) or dead; returns the dead
        ids (shared.blame_policy.judge_interruptions)."""
        s, cap = self.scope, self.max_interruptions
        verdict = judge_interruptions(found, cap, fenced=fenced)
        again, dead = verdict.again, verdict.dead
        if again:
            self._interrupted(cur, found, again, why, dead=False)
        if verdict.excused:
            text = storable_text(why + EXCUSED)
            self._interrupted(cur, found, verdict.excused, text, dead=False, counted=False)
            s.log.warning(
                "%d %s(s) of %s interrupted with their workers (%d), not counted: a fleet-wide event, "
                "or a worker that fenced itself",
                len(verdict.excused),
                s.noun,
                s.place,
                len({w for *_, w in found}),
                extra={"event": f"{s.noun}.interrupted_excused", "source": self.src.name},
            )
        if dead:
            text = f"dead: interrupted {cap} times; its worker keeps dying (killed, out of memory...)"
            self._interrupted(cur, found, dead, text, dead=True)
            fields = {"event": f"{s.noun}.dead_interrupted", "source": self.src.name, f"{s.noun}_ids": dead}
            s.log.error(
                "%d %s(s) of %s dead after %d interruptions", len(dead), s.noun, s.place, cap, extra=fields
            )
        return dead

    def close(self) -> None:
        """Close this store's session and end its lease keeper (LeaseKeeper.close)."""
        self._leases.close()
        self.db.close()

    # -- finishing, used by the batch under its fence; 0 rows written = stale, counted there --------

    def finish_failed(self, cur: Cursor, row: Row, outcome: object) -> str:
        """A failed run: "retried" (pending after the kind's delay) or "dead"; "" when it was stale."""
        text = error_text(outcome)
        delay_s = self._retry_in(row)
        if delay_s is None:
            return "dead" if self.finish_dead(cur, row, text, 1, outcome="failed") else ""
        return "retried" if self._fail_retry(cur, row, _us(delay_s), text) else ""

    def finish_special(self, cur: Cursor, row: Row, ack: Ack) -> int:
        """A handler's explicit retry (not a failure) or discard (dead now)."""
        if ack.action == "discard":
            text = f"discarded by its {self.scope.author}" + (f": {ack.reason}" if ack.reason else "")
            text = storable_text(text)  # a hand-built Ack skips Ack.discard's own
            return self.finish_dead(cur, row, text, 0, outcome="discarded")
        at = ack.at
        if at is not None and at.tzinfo is not None:  # hand-built: the driver would drop the zone
            at = at.astimezone(UTC).replace(tzinfo=None)
        return self._snooze(cur, row, at, _us(ack.delay_s))

    # -- what a kind decides -------------------------------------------------------------------------

    @abstractmethod
    def _retry_in(self, row: Row) -> float | None:
        """The delay before a failed run's next attempt, or None when it is dead (the kind logs it)."""

    # -- what a unit shape does (row_units.RowUnits, run_units.RunUnits) ---------------------------

    @abstractmethod
    def _start_units(self, entries: Sequence[Entry], began: Started) -> None:
        """Lock the entries' units still DISPATCHED under their attempt, mark the first group RUNNING
        with a lease since the start's own time (`began.at`) and read its rows; one transaction,
        committed on return. Fills `began` as it goes: a COMMIT cut off leaves it for `_resume`."""

    @abstractmethod
    def _started_by(self, cur: Cursor, began: Started) -> set[int]:
        """Of `began.units`, the ids RUNNING under their attempt by this worker since `began.at`
        (locked): what that start committed, if it did."""

    @abstractmethod
    def _drop_empty(self, units: list[Entry]) -> None:
        """Units started with nothing left in them to run: they go."""

    @abstractmethod
    def _batch(self, began: Started, rows: list[Row]) -> LeasedBatch: ...

    @abstractmethod
    def _give_back(self, cur: Cursor, began: Started) -> None:
        """The started units -> due again now, fenced on their attempt and RUNNING."""

    @abstractmethod
    def _renew(self, cur: Cursor, entries: Sequence[Entry]) -> Extended: ...

    @abstractmethod
    def _requeue_dispatched(self, after_s: float, limit: int) -> int:
        """DISPATCHED for longer than `after_s`, never started -> pending (no interruption: nothing ran)."""

    @abstractmethod
    def release_unpushed(self, entries: Sequence[Entry]) -> int:
        """Claimed but never pushed (Redis refused) -> pending now, fenced on the new attempt."""

    @abstractmethod
    def reset_dispatched(self) -> int:
        """Everything DISPATCHED or RUNNING -> pending. Only when no dispatcher or worker runs."""

    @abstractmethod
    def _interrupt_expired(self, cur: Cursor, limit: int) -> tuple[int, int]:
        """Interrupt (`_blame`) up to `limit` units whose lease ran out: (rows found, rows dead)."""

    @abstractmethod
    def _interrupt_worker(
        self, cur: Cursor, worker: str, why: str, limit: int, fenced: bool
    ) -> tuple[int, int, bool]:
        """Interrupt `worker`'s RUNNING units (excused if it `fenced` itself): (rows found, rows
        dead, whether more may be left)."""

    @abstractmethod
    def _interrupted(
        self,
        cur: Cursor,
        found: Sequence[Interrupted],
        ids: list[int],
        why: str,
        *,
        dead: bool,
        counted: bool = True,
    ) -> None:
        """Write interrupted `ids` (of `found`): pending again now, or dead (`dead`), with `why`;
        `counted`: the interruption adds to their count (excused ones do not)."""

    @abstractmethod
    def finish_ok(self, cur: Cursor, rows: Sequence[Row]) -> int: ...

    def finish_ok_with_result(self, cur: Cursor, row: Row, result: str) -> int:
        """A success carrying a task's result; kinds that keep none finish it as any success."""
        return self.finish_ok(cur, [row])

    @abstractmethod
    def finish_dead(self, cur: Cursor, row: Row, text: str, errors: int, outcome: str = "dead") -> int: ...

    @abstractmethod
    def _fail_retry(self, cur: Cursor, row: Row, delay_us: int, text: str) -> int: ...

    @abstractmethod
    def _snooze(self, cur: Cursor, row: Row, at: datetime | None, delay_us: int) -> int: ...
