"""Keeps the leases of started work alive while its handlers run: every lease/3, on its own connection
and thread (started at first use). What "extend" means is the store's (a fenced UPDATE); this owns
only the pacing and the bookkeeping of which batches are held.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

import pymysql

from shared.db import Database
from shared.keys import Entry
from shared.settings import MySQLSettings

log = logging.getLogger("duecast.leases")

Extend = Callable[[Database, Sequence[Entry]], int]  # returns how many leases it kept
EXIT_HUNG = 75  # the worker's exit code after a hung batch (EX_TEMPFAIL: restart me)


class LeaseKeeper:
    """Entries whose lease cannot be kept will ack stale (fenced) and run again elsewhere: that is the
    worker fencing itself off, not an error to raise."""

    def __init__(
        self,
        extend: Extend,
        lease_s: float,
        mysql: MySQLSettings,
        what: str,
        *,
        timeout_s: float | None = None,
    ) -> None:
        self._extend = extend
        self._lease_s = lease_s
        self._mysql = mysql
        self._what = what
        self._timeout_s = timeout_s  # a batch held longer is hung: the process leaves (EXIT_HUNG)
        self._held: dict[int, tuple[list[Entry], float]] = {}  # token -> (entries, monotonic start)
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    @contextmanager
    def holding(self, entries: list[Entry]) -> Iterator[None]:
        token = id(entries)
        with self._lock:
            self._held[token] = (entries, time.monotonic())
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="duecast-lease", daemon=True)
                self._thread.start()
        try:
            yield
        finally:
            with self._lock:
                del self._held[token]

    def _run(self) -> None:
        db = Database(self._mysql)
        while True:
            time.sleep(self._lease_s / 3)
            with self._lock:
                batches = list(self._held.values())
            for entries, started in batches:
                if self._timeout_s is not None and time.monotonic() - started > self._timeout_s:
                    # Self-fencing: stop keeping the leases and leave. They run out, the sweeper
                    # counts the interruption, and another worker runs the work.
                    log.critical(
                        "a batch of %d %s has run longer than its timeout (%.0fs): a handler is hung; "
                        "exiting so the work runs elsewhere",
                        len(entries),
                        self._what,
                        self._timeout_s,
                    )
                    os._exit(EXIT_HUNG)
                try:
                    kept = self._extend(db, entries)
                except pymysql.err.MySQLError as exc:
                    log.warning("could not extend the leases of %d %s: %s", len(entries), self._what, exc)
                    continue
                if kept < len(entries):
                    log.warning("%d of %d %s lost their lease", len(entries) - kept, len(entries), self._what)
