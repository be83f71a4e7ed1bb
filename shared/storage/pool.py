"""A few MySQL connections shared by the threads of one writer (Enqueuer, Publisher): each unit of
work borrows one for its transaction, so no connection is ever used by two threads at once; and the
threads that run its async callers' writes, so an event loop never waits for MySQL.
"""

from __future__ import annotations

import asyncio
import queue
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from typing import Any

from ..settings import MySQLSettings
from .db import Database
from .units import Cursor

# Per writer: its async callers' threads, and a bound on threads sharing it. More make no more commits
# on 2 cores (200 aenqueues took as long with 8 as with 4), only more threads taking the GIL from the
# caller's event loop.
WRITER_CONNECTIONS = 4
Item = tuple[Callable[[], Any], "Future[Any]"]  # a call and the future its caller awaits


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
    """`size` threads running the calls handed to `submit_soon`. A loop's calls are handed over once
    the tasks it is running now have all made theirs: a thread woken mid-burst takes the GIL from the
    loop in the middle of it (measured: the first steps of 200 tasks started by one gather took 25 ms
    so, 4 ms handed over together). The threads start at the first call, before any work waits."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._work: queue.SimpleQueue[Item | None] = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        self._soon: dict[asyncio.AbstractEventLoop, list[Item]] = {}  # per loop: calls not handed over

    def submit_soon(self, call: Callable[[], Any], loop: asyncio.AbstractEventLoop) -> Future[Any]:
        """`call`'s future; the call reaches a thread at `loop`'s next turn, with the others made in
        this one."""
        future: Future[Any] = Future()
        with self._lock:
            if not self._threads:
                for n in range(self.size):
                    thread = threading.Thread(target=self._run, name=f"duecast-writer-{n}", daemon=True)
                    thread.start()
                    self._threads.append(thread)
            batch = self._soon.get(loop)
            if batch is None:
                batch = self._soon[loop] = []
                loop.call_soon(self._hand_over, loop)
            batch.append((call, future))
        return future

    def _hand_over(self, loop: asyncio.AbstractEventLoop) -> None:
        with self._lock:
            batch = self._soon.pop(loop, [])
        for item in batch:
            self._work.put(item)

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
