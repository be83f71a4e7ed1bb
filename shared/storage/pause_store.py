"""Pauses in MySQL (duecast_pauses): set and cleared by operators, read by every dispatcher and
worker at most every PAUSE_REFRESH_S, so a pause holds through any restart and any Redis flush.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from dataclasses import dataclass

from ..queries import pauses as sql
from .db import Database
from .units import MYSQL_ERRORS, StorageError, access_denied

log = logging.getLogger("duecast.pauses")

TASK = "task"  # the kind whose pause stops one task's jobs, not a dispatch source
PAUSE_REFRESH_S = 0.5  # a pause stops new claims and starts within about this, plus a tick
_NO_SUCH_TABLE = 1146


@dataclass(frozen=True)
class Pause:
    kind: str  # source | queue | group | task
    name: str  # as the operator named it (a group: "topic group")
    source: str  # the dispatch source it stops ("" for a task: it stops no source, only its jobs)
    paused_at: dt.datetime


class PauseStore:
    def __init__(self, db: Database) -> None:
        self.db = db
        self._sources: frozenset[str] = frozenset()
        self._tasks: frozenset[str] = frozenset()
        self._read_at = -PAUSE_REFRESH_S
        self._missing_logged = False

    def list(self) -> list[Pause]:
        with self.db.transaction() as cur:
            cur.execute(sql.LIST)
            return [Pause(str(k), str(n), str(s), t) for k, n, s, t in cur.fetchall()]

    def pause(self, kind: str, name: str, source: str) -> bool:
        """Pause; False when it already was (its first time stays)."""
        with self.db.transaction() as cur:
            return bool(cur.execute(sql.PAUSE, (kind, name, source)))

    def resume(self, kind: str, name: str) -> bool:
        """Resume; False when it was not paused."""
        with self.db.transaction() as cur:
            return bool(cur.execute(sql.RESUME, (kind, name)))

    def paused_sources(self, now: float | None = None) -> frozenset[str]:
        """The dispatch sources paused now, read again once PAUSE_REFRESH_S has passed. While MySQL
        cannot answer, the last answer holds (a role that cannot read it cannot claim or start
        either); a database not migrated since pauses came has none."""
        now = time.monotonic() if now is None else now
        if now - self._read_at < PAUSE_REFRESH_S:
            return self._sources
        self._read_at = now
        try:
            listed = self.list()
            self._sources = frozenset(p.source for p in listed if p.kind != TASK)
            self._tasks = frozenset(p.name for p in listed if p.kind == TASK)
        except StorageError as exc:
            if exc.code != _NO_SUCH_TABLE and not access_denied(exc):
                raise
            if not self._missing_logged:  # an upgrade that skipped `duecast migrate` or the grants
                log.warning(
                    "cannot read %s (%s): pauses are not seen; run `duecast migrate` and grant SELECT "
                    "on it (sql/grants.sql)",
                    sql.PAUSES_TABLE,
                    exc,
                    extra={"event": "pauses.unreadable"},
                )
                self._missing_logged = True
            self._sources = self._tasks = frozenset()
        return self._sources

    def paused_or_last(self) -> frozenset[str]:
        """paused_sources, or the last answer when MySQL fails now (the caller's own SQL will say)."""
        try:
            return self.paused_sources()
        except MYSQL_ERRORS:
            return self._sources

    def paused_tasks(self) -> frozenset[str]:
        """The job tasks paused at the last read of paused_sources: no I/O, so a job store may ask
        it inside its claim or start (the role reads paused_sources every tick, before those)."""
        return self._tasks

    def close(self) -> None:
        self.db.close()
