"""Work a LeasedStore started for one group of a worker batch (jobs, or a cluster group's messages): the
groups left to start after it, and its fenced finishes, each a unit retried on transient errors.
"""

from __future__ import annotations

import traceback
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from logging import Logger
from typing import Protocol, TypeVar

from ...acks import Ack, Row
from ...entries import Entry
from ...errors import DuecastError
from ...limits import shown, storable_text
from ...settings import SourceSettings
from ...telemetry import observe
from ..db import Database
from ..source_store import AckCounts
from ..units import Cursor, is_transient, retry_transient, rollback_to, savepoint, whole_unit
from .keeper import Hold

FINISH_RETRIES = 3
T = TypeVar("T")


def error_text(outcome: object) -> str:
    """A failure as stored in last_error: the exception and its traceback, made storable (a lone
    surrogate escaped, cut to shared.limits.ERROR_TEXT_MAX characters)."""
    if isinstance(outcome, BaseException):
        text = "".join(traceback.format_exception(outcome))
    else:
        text = f"invalid result from the task: {shown(outcome)}"
    return storable_text(text)


class SpentAttempt(DuecastError):
    """A transactional task ran, but the ack transaction it ran in did not commit (a deadlock, a lock
    wait, a lost connection): its attempt is over and fails, so the task never runs twice under one
    attempt; the job runs again under a new attempt, as after any failure."""


class AckRefused(DuecastError):
    """The database refused what a handler's Ack asked of its row (a value out of range, text it
    cannot store...): that row failed alone, its batch-mates were acked."""


def finish_group(ack: Ack, handler: str) -> tuple[object, ...]:
    """How a leased batch groups acks into finishes: successes together (one statement), each
    retry, discard or transactional task on its own; `handler` names who may not return the rest."""
    if ack.action in ("default", "delete"):
        return ("done",)
    if ack.action in ("retry", "discard", "transaction"):
        return (ack.action, id(ack))
    raise ValueError(f"{handler} may not return Ack.{ack.action}(); use retry or discard")


class Naming(Protocol):
    """How a store's rows are keyed and named in log lines (scope.Naming)."""

    @property
    def key(self) -> str: ...
    @property
    def noun(self) -> str: ...
    @property
    def place(self) -> str: ...
    @property
    def log(self) -> Logger: ...


class Finisher(Protocol):
    """What a batch finishes its rows with: a LeasedStore, per row (each row fenced on its own
    attempt: row_units.RowUnits) or per run (rows fenced by their run: run_units.RunUnits, runs.py)."""

    db: Database
    src: SourceSettings

    @property
    def scope(self) -> Naming: ...

    def finish_ok(self, cur: Cursor, rows: Sequence[Row]) -> int: ...
    def finish_ok_with_result(self, cur: Cursor, row: Row, result: str) -> int: ...
    def finish_failed(self, cur: Cursor, row: Row, outcome: object) -> str: ...
    def finish_special(self, cur: Cursor, row: Row, ack: Ack) -> int: ...


class LeasedBatch:
    """Work started (RUNNING, committed) for one worker batch. `ack` and `fail` each commit, retried
    as units on transient errors."""

    def __init__(
        self, store: Finisher, rows: list[Row], skipped: int, later: list[list[Entry]] | None = None
    ) -> None:
        self._store = store
        self._key = store.scope.key
        self.rows = rows
        self.skipped = skipped
        self.entries = [Entry(int(r[self._key]), int(r["dc_attempt"])) for r in rows]
        self.hold: Hold | None = None  # the lease keeper's, while the batch runs
        # Entries locked with these but left DISPATCHED: suspects, each group to start on its own
        # once this one is acked (shared.policy.start_groups).
        self.later = later or []
        # A group of suspects (start_groups keeps clean rows and suspects apart): run alone.
        self.suspects = any(int(r.get("interruptions", 0)) > 0 for r in rows)
        self._kept: AbstractContextManager[Hold] | None = None
        # Transactional tasks called in an ack transaction not (yet) known to have committed, and
        # those whose transaction rolled back, with why: neither is called again under this attempt.
        self._called: set[int] = set()
        self._spent: dict[int, SpentAttempt] = {}
        self._extended_at: float | None = None  # when this finish extended the leases it locked

    def keep(self, holding: AbstractContextManager[Hold]) -> None:
        """Keep the batch's leases (the keeper's `holding`) until close()."""
        self.hold = holding.__enter__()
        self._kept = holding

    def close(self) -> None:
        """The batch is over: its leases are no longer extended. Rows neither acked nor failed by
        now stay RUNNING until their lease runs out, and are then redelivered as interrupted."""
        kept, self._kept, self.hold = self._kept, None, None
        if kept is not None:
            kept.__exit__(None, None, None)

    def settle(self) -> AckCounts:
        """Nothing to settle: each job or message is finished by its own ack or fail."""
        return AckCounts(0, 0)

    def _finishing(self, rows: Iterable[Row]) -> None:
        """Tell the lease keeper these rows' ack begins: their leaving RUNNING is not a lost lease."""
        if self.hold is not None:
            self.hold.finishing(int(r[self._key]) for r in rows)

    def _retrying(self, unit: Callable[[], T]) -> T:
        """Run a finishing transaction again after a transient error. Every finish is fenced on
        (id, attempt) and RUNNING, so running it again after a COMMIT that did land changes nothing."""
        what = f"finishing {self._store.scope.noun}s"
        return retry_transient(
            unit, what=what, redo="the finish", retries=FINISH_RETRIES, log=self._store.scope.log
        )

    def _fenced(self, cur: Cursor, rows: Sequence[Row]) -> set[int]:
        """The ids of `rows` this batch may still finish, checked in the finish's transaction. Here
        every one: each finishing statement is fenced on the row's own (id, attempt) and RUNNING."""
        return {int(r[self._key]) for r in rows}

    def _finished(self, cur: Cursor, rows: Sequence[Row]) -> None:
        """Record, in the finish's transaction, that `rows` are finished (nothing to record here)."""

    def phases(self) -> list[list[Row]]:
        """One phase: a start holds one group (the clean rows, or suspects of one count)."""
        return [self.rows] if self.rows else []

    def ack(self, acks: Sequence[tuple[Row, Ack]]) -> AckCounts:
        """Finish handled work in one transaction: successes as one fenced statement, explicit
        retries and discards one by one, transactional tasks each under a savepoint. A transactional
        task runs once per attempt: should its transaction not commit, its attempt fails
        (SpentAttempt) rather than the task being called again."""
        if not acks:
            return AckCounts(0, 0)
        self._finishing(row for row, _ in acks)

        def once() -> tuple[tuple[int, int], list[tuple[Row, object]]]:
            left = [(row, ack) for row, ack in acks if not self._is_spent(row, ack)]
            try:
                return self._ack_once(left)
            except BaseException as exc:
                self._spend(exc)
                raise
            finally:
                self._called.clear()

        (acked, stale), failures = self._retrying(once)
        failures += [(row, self._spent[self._id(row)]) for row, ack in acks if self._is_spent(row, ack)]
        self.fail(failures)
        for row, outcome in failures:  # refusals were logged as they came; a task's own error here
            if isinstance(outcome, BaseException) and not isinstance(outcome, AckRefused):
                self._log_failed(row, outcome)
        return AckCounts(acked, stale, len(failures))

    def _log_failed(self, row: Row, exc: BaseException) -> None:
        """A transactional task's (or consumer's) own error, with its traceback, as the worker logs
        a plain handler's (rate-limited per cause: shared/process/logs.RepeatFilter)."""
        s = self._store.scope
        s.log.error(
            "%s %s of %s failed in its ack transaction: %r",
            s.noun,
            row.get(self._key),
            s.place,
            exc,
            exc_info=(type(exc), exc, exc.__traceback__),
            extra={"event": f"{s.noun}.handler_failed", "source": self._store.src.name},
        )

    def _id(self, row: Row) -> int:
        return int(row[self._key])

    def _is_spent(self, row: Row, ack: Ack) -> bool:
        return ack.action == "transaction" and self._id(row) in self._spent

    def _spend(self, exc: BaseException) -> None:
        """The ack transaction did not commit: every task called in it has had its attempt."""
        for i in self._called:
            self._spent[i] = SpentAttempt(
                f"its transactional task ran, but the transaction did not commit ({exc!r}); "
                "not run again under this attempt"
            )
        if self._called:
            s = self._store.scope
            s.log.warning(
                "an ack transaction of %d transactional tasks of %s did not commit (%r); they fail "
                "this attempt rather than run twice under it",
                len(self._called),
                s.place,
                exc,
                extra={"event": f"{s.noun}.attempt_spent", "source": self._store.src.name},
            )

    @contextmanager
    def _transaction(self) -> Iterator[Cursor]:
        """A finish's transaction. Once it is over, the lease keeper hears whether the leases it
        locked (and so kept, RunBatch) were extended by its commit, or are as they were."""
        self._extended_at = None
        committed = False
        try:
            with self._store.db.transaction() as cur:
                yield cur
            committed = True
        finally:
            if self.hold is not None:
                self.hold.disown(self._extended_at if committed else None)

    def _ack_once(self, acks: Sequence[tuple[Row, Ack]]) -> tuple[tuple[int, int], list[tuple[Row, object]]]:
        store = self._store
        acked = stale = discarded = 0
        failures: list[tuple[Row, object]] = []
        unfinished: set[int] = set()  # by identity: rows this ack leaves as they are
        with self._transaction() as cur:
            mine = self._fenced(cur, [row for row, _ in acks])
            stale = len(acks) - len(mine)
            acks = [(row, ack) for row, ack in acks if int(row[self._key]) in mine]
            done = [row for row, ack in acks if ack.action in ("default", "delete") and ack.result is None]
            for row, ack in acks:
                if ack.action in ("default", "delete") and ack.result is not None:
                    n = store.finish_ok_with_result(cur, row, ack.result)
                    acked += n
                    stale += 1 - n
            if done:
                n = store.finish_ok(cur, done)
                acked += n
                stale += len(done) - n
            for row, ack in acks:
                if ack.action in ("retry", "discard"):
                    special = self._special(cur, row, ack)
                    if isinstance(special, AckRefused):
                        failures.append((row, special))
                        continue
                    n = special
                    acked += n
                    stale += 1 - n
                    discarded += n if ack.action == "discard" else 0
                elif ack.action == "transaction":
                    outcome = self._in_transaction(cur, row, ack)
                    if outcome is None:
                        acked += 1
                    elif outcome == "stale":
                        stale += 1
                    elif outcome == "late":
                        stale += 1
                        unfinished.add(id(row))
                    else:
                        failures.append((row, outcome))
            unfinished |= {id(row) for row, _ in failures}  # failures: finished by fail(), on its own
            self._finished(cur, [row for row, _ in acks if id(row) not in unfinished])
        observe.count(store.src.name, "dead", discarded)
        return (acked, stale), failures

    def _special(self, cur: Cursor, row: Row, ack: Ack) -> int | AckRefused:
        """A retry or discard under its own savepoint: whatever the database (or the driver) refuses
        of it fails this row alone, logged; its batch-mates' acks stand. A transient error is the
        whole transaction's: the unit is run again."""
        try:
            with savepoint(cur, "dc_ack"):
                return self._store.finish_special(cur, row, ack)
        except Exception as exc:
            if whole_unit(exc):  # read-only too: not this row's refusal
                raise
            return self._refused(row, f"Ack.{ack.action}()", exc)

    def _refused(self, row: Row, what: str, exc: BaseException) -> AckRefused:
        """Log (rate-limited: one template, shared/process/logs.RepeatFilter) why the database
        refused `what` for `row`; the row then fails alone with this as its error."""
        s = self._store.scope
        why = storable_text(str(exc) or type(exc).__name__, 500)
        s.log.warning(
            "%s %s of %s: the database refused its %s (%s); it fails alone",
            s.noun,
            row.get(self._key),
            s.place,
            what,
            why,
            extra={"event": f"{s.noun}.ack_refused", "source": self._store.src.name},
        )
        return AckRefused(f"the database refused its {what}: {why}")

    def _in_transaction(self, cur: Cursor, row: Row, ack: Ack) -> object | None:
        """Run a transactional task and finish it under one savepoint: its writes stay only if the
        job really is finished by this attempt. Returns None (done), "stale", "late" (not called: its
        lease may have run out, Hold.may_start; the job is left to come back by it), or the failure."""
        assert ack.work is not None
        if self.hold is not None and not self.hold.may_start():
            s = self._store.scope
            s.log.warning(
                "%s %s of %s: its lease ran out before its handler started; not running it (it comes "
                "back by its lease)",
                s.noun,
                row.get(self._key),
                s.place,
                extra={"event": f"{s.noun}.lease_ran_out", "source": self._store.src.name},
            )
            return "late"
        try:
            with savepoint(cur, "dc_job"):
                self._called.add(self._id(row))  # from here on, this attempt has run its task
                result = ack.work(cur)
                final = Ack.default() if result is None else result
                if not isinstance(final, Ack) or final.action in ("touch", "transaction"):
                    raise TypeError(f"a task must return None, Ack.retry or Ack.discard, not {final!r}")
                if final.action in ("default", "delete"):
                    n = self._store.finish_ok(cur, [row])
                else:
                    n = self._store.finish_special(cur, row, final)
        except BaseException as exc:  # SystemExit in a task is its failure, not the worker's exit
            if is_transient(exc):
                raise  # the whole transaction is gone: the finish is retried as one unit
            return exc  # the savepoint undid the task's writes
        if n == 0:
            rollback_to(cur, "dc_job")  # another run owns the job now: undo its writes
            return "stale"
        return None

    def fail(self, failures: Sequence[tuple[Row, object]]) -> None:
        """Failed runs: pending again after the kind's delay, or dead once out of attempts."""
        if not failures:
            return
        self._finishing(row for row, _ in failures)

        def once() -> Counter[str]:
            outcomes: Counter[str] = Counter()
            with self._transaction() as cur:
                mine = self._fenced(cur, [row for row, _ in failures])
                outcomes[""] += len(failures) - len(mine)
                ended = [(row, outcome) for row, outcome in failures if int(row[self._key]) in mine]
                for row, outcome in ended:
                    outcomes[self._fail_one(cur, row, outcome)] += 1
                self._finished(cur, [row for row, _ in ended])
            return outcomes

        outcomes = self._retrying(once)
        for name in ("retried", "dead"):  # counted once committed
            observe.count(self._store.src.name, name, outcomes[name])

    def _fail_one(self, cur: Cursor, row: Row, outcome: object) -> str:
        """One failure under its own savepoint. Should the database refuse even that, the row fails
        with the refusal as its error instead; should it refuse that too, the row is left to its
        lease (interrupted once it runs out): never a poison that stalls the rest."""
        try:
            with savepoint(cur, "dc_fail"):
                return self._store.finish_failed(cur, row, outcome)
        except Exception as exc:
            if whole_unit(exc):
                raise
            refused = self._refused(row, "failure", exc)
        try:
            with savepoint(cur, "dc_fail"):
                return self._store.finish_failed(cur, row, refused)
        except Exception as exc:
            if whole_unit(exc):
                raise
            return ""
