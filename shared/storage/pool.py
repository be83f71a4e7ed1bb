"""A few MySQL connections shared by the threads of one writer (Enqueuer, Publisher): each unit of
work borrows one for its transaction, so no connection is ever used by two threads at once.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from ..settings import MySQLSettings
from .db import Database
from .units import Cursor

WRITER_CONNECTIONS = 8  # per writer: its async callers' threads, and a bound on threads sharing it


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
        """Close the idle connections (one in use is closed when its unit ends and it is next closed)."""
        with self._lock:
            idle = list(self._idle)
        for db in idle:
            db.close()
