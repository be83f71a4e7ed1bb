"""A few MySQL connections shared by the threads of one writer (Enqueuer, Publisher): each unit of
work borrows one for its transaction, so no connection is ever used by two threads at once; and the
threads that run its async callers' writes, so an event loop never waits for MySQL.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from typing import Any

from ..settings import MySQLSettings
from .db import Database
from .units import Cursor

# Per writer: its async callers' threads, and a bound on threads sharing it. More threads make no more
# commits on 2 cores, only longer waits for the GIL on the caller's event loop (measured: with 8, the
# loop's worst lag under 200 concurrent aenqueues was twice that with 4).
WRITER_CONNECTIONS = 4


class Pool:
    """Up to `size` lazily opened Databases; `transaction()` as Database's, waiting for a free one
    when all are in use. A connection that broke is replaced by its Database at its next unit."""

    def __init__(self, settings: MySQLSettings, size: int = WRITER_CONNECTIONS) -> None:
        self._settings = settings
        self.size = size
        self._free = threading.BoundedSemaphore(size)
        self._lock = threading.Lock()
        self._idle: list[Database] = []

    @property
    def settings(self) -> MySQLSettings:
        return self._settings

    @contextmanager
    def transaction(self, *, check: bool = False) -> Iterator[Cursor]:
        """A unit of work on a connection of its own (Database.transaction)."""
        with self._free:
            with self._lock:
                db = self._idle.pop() if self._idle else Database(self._settings)
            try:
                with db.transaction(check=check) as cur:
                    yield cur
            finally:
                with self._lock:
                    self._idle.append(db)

    def close(self) -> None:
        """Close the idle connections (a unit running meanwhile keeps its own until it ends; the pool
        opens connections again if used after this)."""
        with self._lock:
            idle = list(self._idle)
        for db in idle:
            db.close()


class Threads:
    """`size` threads running calls handed to `submit`, all started at the first call, before any
    work is queued: a thread started later, with work waiting, would take the GIL from the caller's
    event loop during the start (ThreadPoolExecutor's way: 100+ ms stalls measured under 200 calls)."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._work: queue.SimpleQueue[tuple[Callable[[], Any], Future[Any]] | None] = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()

    def submit(self, call: Callable[[], Any]) -> Future[Any]:
        with self._lock:
            if not self._threads:
                for n in range(self.size):
                    thread = threading.Thread(target=self._run, name=f"duecast-writer-{n}", daemon=True)
                    thread.start()
                    self._threads.append(thread)
        future: Future[Any] = Future()
        self._work.put((call, future))
        return future

    def _run(self) -> None:
        while (item := self._work.get()) is not None:
            call, future = item
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(call())
            except BaseException as exc:  # handed to the awaiting caller, as a thread pool would
                future.set_exception(exc)

    def shutdown(self) -> None:
        """Let queued calls finish, then end the threads."""
        with self._lock:
            threads, self._threads = self._threads, []
        for _ in threads:
            self._work.put(None)
        for thread in threads:
            thread.join()
