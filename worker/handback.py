"""What a worker's supervisor does the moment its child process has exited: the rows the child had
started are interrupted now (not when their leases run out), the batch it had popped and not started
goes back to pending (not when the leader finds it silent), and its registry row and hold go. Re-scan
rows and range mode's spans record no worker in MySQL: the child's started records in Redis say
which it held (shared/fanout/started.py), and those still RUNNING under that attempt are due now.

Only for a process waitpid reported as ended: nothing of it can run any more. Owns no SQL (the
stores' interrupt_worker, and shared.storage.holds, which redelivery's "held" cause runs too) and
never imports the user's app. Ending the leases is retried on a deadlock or lock wait (or a lost
session) with jittered backoff until it succeeds or the leases have run out anyway, in small
transactions on a session that waits at most 1 s for a lock, so it never holds up other workers'
renewals for long. A step that still fails leaves that part to the leases and the leader, as if
there were no supervisor.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from ..shared.entries import BadHold
from ..shared.fanout.protocol import Queue, QueueError
from ..shared.process.runtime import build_queue, build_stores, store_kinds
from ..shared.settings import Settings
from ..shared.storage.db import Database
from ..shared.storage.holds import hold_entries, requeue_hold
from ..shared.storage.leased.store import LeasedStore
from ..shared.storage.protocol import StartsUnnamed
from ..shared.storage.schema import SchemaError
from ..shared.storage.source_store import Store
from ..shared.storage.units import MYSQL_ERRORS, retry_transient
from ..shared.storage.worker_registry import WorkerRegistry

T = TypeVar("T")
log = logging.getLogger("duecast.supervisor")
# What a step may meet and leave to the leases and the leader (KeyError: a hold's source not configured here).
FAILURES: tuple[type[Exception], ...] = (*MYSQL_ERRORS, QueueError, SchemaError, KeyError)
# Ending an exited worker's leases: runs (or a group's messages) per transaction, and the session's
# innodb_lock_wait_timeout (its floor). A lock met is waited for briefly and the batch retried,
# rather than one long transaction holding rows other workers' renewals want.
HANDBACK_BATCH = 50
STARTED_BATCH = 500  # re-scan rows or spans a dead worker started, per transaction (no trace, no blame)
HANDBACK_LOCK_WAIT_S = 1


@dataclass(frozen=True)
class HandedBack:
    held: int = 0  # popped rows, never started, pending again
    interrupted: int = 0  # started rows interrupted (pending again, or dead at their last interruption)
    complete: bool = True  # False: a step failed; its part waits for the leases or the leader
    requeued: int = 0  # started re-scan rows and spans, due again now (its started records)


class Handback:
    """Built once per supervisor; its stores and connections are made at the first exit (a parent
    that never sees its child die never opens one)."""

    def __init__(
        self,
        settings: Settings,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], object] = time.sleep,
    ) -> None:
        self.settings = settings
        # Its stores' sessions wait at most HANDBACK_LOCK_WAIT_S for a row lock.
        self._store_settings = settings.model_copy(
            update={"mysql": settings.mysql.model_copy(update={"lock_wait_s": HANDBACK_LOCK_WAIT_S})}
        )
        self.clock = clock
        self.sleep = sleep
        self._queue: Queue | None = None
        self._stores: dict[str, Store] = {}
        self._workers: WorkerRegistry | None = None

    def after_exit(self, worker: str, why: str, *, fenced: bool = False) -> HandedBack:
        """Hand back everything `worker` (an ended process) held. The hold goes first: requeueing it
        waits for the dead sessions' row locks, so the child's last start has committed or rolled
        back before its RUNNING rows are read. `fenced`: it exited because it could not keep its
        leases in MySQL (EXIT_FENCED), so its interruptions are excused (shared.blame_policy)."""
        self._close()  # an idle connection may be long dead (wait_timeout): fresh ones, as needed
        leases_end = self.clock() + self._lease_s()  # its leases, renewed at most until now, end by then
        try:
            held = self._retrying(
                lambda: self._requeue_hold(worker), f"requeueing what {worker} popped", leases_end
            )
        except FAILURES as exc:
            self._failed(worker, "requeue the rows it had popped", exc)
            interrupted = self._interrupt(worker, why, leases_end, fenced)[0]
            return HandedBack(
                interrupted=interrupted, complete=False, requeued=self._requeue_started(worker, leases_end)[0]
            )
        interrupted, complete = self._interrupt(worker, why, leases_end, fenced)
        requeued, all_started = self._requeue_started(worker, leases_end)
        try:
            self._registry().deregister(worker)
            self._redis().release_hold(worker)
            self._redis().forget_started(worker)  # what failed above is its leases' now
        except FAILURES as exc:
            self._failed(worker, "forget it", exc)  # the leader does, once it is silent
        return HandedBack(held, interrupted, complete and all_started, requeued)

    def _requeue_started(self, worker: str, leases_end: float) -> tuple[int, bool]:
        """(rows or spans due again, every record done?): each batch `worker` recorded as started
        and not finished, its units still RUNNING under that attempt -> due now, STARTED_BATCH per
        transaction, each retried as _end_leases does. A record of a source not served here, or
        one that keeps failing, is left to the leases."""
        try:
            records = self._redis().started_by(worker)
        except FAILURES as exc:
            self._failed(worker, "read what it had started", exc)
            return 0, False
        total, complete = 0, True
        for source, raws in records:
            entries = hold_entries(raws)
            try:
                store = self._store(source)
                if not isinstance(store, StartsUnnamed):
                    continue
                for i in range(0, len(entries), STARTED_BATCH):
                    part = entries[i : i + STARTED_BATCH]
                    total += self._retrying(
                        functools.partial(store.requeue_started, part),
                        f"requeueing what exited worker {worker} had started of {source}",
                        leases_end,
                    )
            except FAILURES as exc:
                self._failed(worker, f"requeue what it had started of {source}", exc)
                complete = False
        return total, complete

    def _interrupt(self, worker: str, why: str, leases_end: float, fenced: bool) -> tuple[int, bool]:
        """(rows and jobs interrupted, every store's done?): each store on its own, so one that
        keeps failing leaves only its own leases to run out."""
        try:
            stores = [s for s in self._leased() if isinstance(s, LeasedStore)]
        except FAILURES as exc:
            self._failed(worker, "end its leases", exc)
            return 0, False
        total, complete = 0, True
        for store in stores:
            try:
                total += self._end_leases(store, worker, why, leases_end, fenced)
            except FAILURES as exc:
                self._failed(worker, f"end its leases of {store.src.name}", exc)
                complete = False
        return total, complete

    def _end_leases(self, store: LeasedStore, worker: str, why: str, leases_end: float, fenced: bool) -> int:
        """`worker`'s leases of `store` ended, HANDBACK_BATCH runs or messages per transaction; a
        batch that meets a deadlock, a lock wait or a lost session is retried with jittered backoff
        for as long as the leases would have lasted (after that, the sweep takes them anyway)."""
        total = 0
        while True:
            found, more = self._retrying(
                lambda: store.interrupt_worker_batch(worker, why, HANDBACK_BATCH, fenced=fenced),
                f"ending the leases of exited worker {worker} of {store.src.name}",
                leases_end,
            )
            total += found
            if not more:
                return total

    def _retrying(self, unit: Callable[[], T], what: str, leases_end: float) -> T:
        """Run a fenced step again after a transient error, with jittered backoff, until the time
        the leases would have run out (each retry one WARNING line, `supervisor.handback_retried`)."""
        return retry_transient(
            unit,
            what=what,
            redo="the hand-back",
            retries=None,
            budget_s=max(0.0, leases_end - self.clock()),
            base_s=0.05,
            cap_s=1.0,
            log=log,
            event="supervisor.handback_retried",
            sleep=self.sleep,
            clock=self.clock,
        )

    def _lease_s(self) -> float:
        """The longest lease a child's work holds (job runs, cluster groups' messages, rows, spans)."""
        s = self.settings
        leases = [s.jobs.lease_s] if s.jobs.enabled else []
        if s.topics.names:
            leases.append(s.topics.lease_s)
        leases += [src.lease_s for src in s.sources]
        return max(leases, default=s.jobs.lease_s)

    def _requeue_hold(self, worker: str) -> int:
        """The rows of its last pop it had not started (DISPATCHED, fenced on their attempt) -> pending."""
        try:
            done = requeue_hold(self._redis(), worker, self._store)
        except BadHold as bad:  # the leader quarantines it, when it finds the worker silent
            log.warning(
                "worker %s's hold record does not parse (%s); leaving it to the leader", worker, bad.reason
            )
            return 0
        return done.rows if done is not None else 0

    def _failed(self, worker: str, what: str, exc: BaseException) -> None:
        log.warning(
            "could not %s of exited worker %s (%s: %s); its leases or the leader will",
            what,
            worker,
            type(exc).__name__,
            exc,
            extra={"event": "supervisor.handback_failed", "worker": worker},
        )

    def _redis(self) -> Queue:
        if self._queue is None:
            self._queue = build_queue(self.settings)
        return self._queue

    def _registry(self) -> WorkerRegistry:
        if self._workers is None:
            self._workers = WorkerRegistry(Database(self.settings.mysql), self.settings.worker)
        return self._workers

    def _leased(self) -> list[Store]:
        """A store per job queue and cluster group (a child may serve any of them)."""
        leased = store_kinds(self.settings)
        return [self._store(src.name) for src in self.settings.all_sources() if src.name in leased]

    def _store(self, source: str) -> Store:
        if source not in self._stores:
            (store,) = build_stores(self._store_settings, [self.settings.source(source)])
            self._stores[source] = store
        return self._stores[source]

    def close(self) -> None:
        """Close every session and the Redis client: the supervisor forks its next child from this
        process, which must carry no socket of ours. Each opens again when next needed."""
        self._close()
        if self._queue is not None:
            self._queue.close()
            self._queue = None

    def _close(self) -> None:
        """Close every session (each opens again at its next statement)."""
        for store in self._stores.values():
            store.close()
        if self._workers is not None:
            self._workers.db.close()
