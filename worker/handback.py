"""What a worker's supervisor does the moment its child process has exited: the rows the child had
started are interrupted now (not when their leases run out), the batch it had popped and not started
goes back to pending (not when the leader finds it silent), and its registry row and hold go.

Only for a process waitpid reported as ended: nothing of it can run any more. Owns no SQL (the
stores' interrupt_worker and requeue_held) and never imports the user's app. A step that fails
leaves that part to the leases and the leader, as if there were no supervisor.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from ..shared.entries import BadEntry, BadHold, decode_entry
from ..shared.fanout.protocol import Queue, QueueError
from ..shared.process.runtime import build_queue, build_stores, store_kinds
from ..shared.settings import Settings
from ..shared.storage.db import Database
from ..shared.storage.leased.jobs import JobStore
from ..shared.storage.leased.store import LeasedStore
from ..shared.storage.schema import SchemaError
from ..shared.storage.source_store import Store
from ..shared.storage.units import MYSQL_ERRORS
from ..shared.storage.worker_registry import WorkerRegistry

log = logging.getLogger("duecast.supervisor")
# What a step may meet and leave to the leases and the leader (KeyError: a hold's source not configured here).
FAILURES: tuple[type[Exception], ...] = (*MYSQL_ERRORS, QueueError, SchemaError, KeyError)


@dataclass(frozen=True)
class HandedBack:
    held: int = 0  # popped rows, never started, pending again
    interrupted: int = 0  # started rows interrupted (pending again, or dead at their last interruption)
    complete: bool = True  # False: a step failed; its part waits for the leases or the leader


class Handback:
    """Built once per supervisor; its stores and connections are made at the first exit (a parent
    that never sees its child die never opens one)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._queue: Queue | None = None
        self._stores: dict[str, Store] = {}
        self._workers: WorkerRegistry | None = None

    def after_exit(self, worker: str, why: str) -> HandedBack:
        """Hand back everything `worker` (an ended process) held. The hold goes first: requeueing it
        waits for the dead sessions' row locks, so the child's last start has committed or rolled
        back before its RUNNING rows are read."""
        self._close()  # an idle connection may be long dead (wait_timeout): fresh ones, as needed
        try:
            held = self._requeue_hold(worker)
        except FAILURES as exc:
            self._failed(worker, "requeue the rows it had popped", exc)
            return HandedBack(interrupted=self._interrupt(worker, why), complete=False)
        interrupted = self._interrupt(worker, why)
        try:
            self._registry().deregister(worker)
            self._redis().release_hold(worker)
        except FAILURES as exc:
            self._failed(worker, "forget it", exc)  # the leader does, once it is silent
        return HandedBack(held, interrupted)

    def _interrupt(self, worker: str, why: str) -> int:
        try:
            stores = self._leased()
            return sum(
                s.interrupt_worker(worker, why) for s in stores if isinstance(s, LeasedStore | JobStore)
            )
        except FAILURES as exc:
            self._failed(worker, "end its leases", exc)
            return 0

    def _requeue_hold(self, worker: str) -> int:
        """The rows of its last pop it had not started (DISPATCHED, fenced on their attempt) -> pending."""
        try:
            held = self._redis().held_by(worker)
        except BadHold as bad:  # the leader quarantines it, when it finds the worker silent
            log.warning(
                "worker %s's hold record does not parse (%s); leaving it to the leader", worker, bad.reason
            )
            return 0
        if held is None:
            return 0
        source, raws = held
        entries = []
        for raw in raws:
            try:
                entries.append(decode_entry(raw))
            except BadEntry:
                continue  # the record is ours, but Redis is not trusted
        n = self._store(source).requeue_held(entries) if entries else 0
        if n:
            self._redis().add_stats(source, {"requeued": n})
        return n

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
            (store,) = build_stores(self.settings, [self.settings.source(source)])
            self._stores[source] = store
        return self._stores[source]

    def _close(self) -> None:
        """Close every session (each opens again at its next statement)."""
        for store in self._stores.values():
            store.close()
        if self._workers is not None:
            self._workers.db.close()
