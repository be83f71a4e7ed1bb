"""The worker registry: each worker process registers, beats on its own thread and connection, and
leaves on exit; the leader dispatcher finds the silent ones. Runs shared.queries.registry.WorkerSQL."""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from ..queries.registry import WorkerSQL, render_workers
from ..settings import JOBS_SOURCE, MySQLSettings, WorkerSettings
from .db import Database
from .schema import SchemaError, described, workers_migration
from .units import MYSQL_ERRORS

log = logging.getLogger("duecast.workers")
MAX_TASKS_TEXT = 1 << 20  # a `tasks` list longer than this was not written by a worker: skipped
BAD_ROWS_WARN_S = 60.0  # one WARNING per table at most this often about malformed rows
_warned: dict[str, float] = {}  # table -> when its malformed rows were last logged


def worker_name(pid: int | None = None) -> str:
    """Who a worker process is: host and pid, as the registry names it and as started jobs and
    messages record it in `worker`. `pid`: a process of this host other than this one (a supervisor
    names its child so)."""
    return f"{socket.gethostname()[:100]}:{os.getpid() if pid is None else pid}"


def is_job_queue(source: str) -> bool:
    return source.startswith(f"{JOBS_SOURCE}.")


@dataclass(frozen=True)
class LiveWorker:
    name: str
    host: str
    pid: int
    sources: str
    started_at: datetime
    silent_s: float  # since its last heartbeat
    tasks: frozenset[str] | None = None  # the job tasks it serves; None: a worker too old to say

    def serves(self, source: str) -> bool:
        return source in self.sources.split(",")


class WorkerRegistry:
    def __init__(self, db: Database, settings: WorkerSettings) -> None:
        self.db = db
        self.settings = settings
        self.sql: WorkerSQL = render_workers(settings.registry_table)
        # What the last alive() skipped, one line per row: the worker account writes these rows,
        # so status and the dashboard say so instead of failing on one.
        self.bad_rows: list[str] = []

    def verify(self) -> None:
        """Start-up check: the table is there and as new as this duecast (else: run migrate)."""
        table = self.settings.registry_table
        with self.db.transaction() as cur:
            info = described(cur, table, f"the workers table {table}")
        if not info.columns or workers_migration(self.settings.registry_table, info):
            raise SchemaError(
                f"the workers table {self.settings.registry_table} is missing or older than this duecast; "
                "run `duecast migrate`"
            )

    def register(self, name: str, sources: list[str], tasks: Iterable[str] | None = ()) -> None:
        """`tasks`: the job tasks it serves (None: unknown, as an older worker registers)."""
        listed = None if tasks is None else json.dumps(sorted(tasks))  # JSON: names may hold commas
        with self.db.transaction() as cur:
            cur.execute(
                self.sql.register,
                (name, socket.gethostname()[:128], os.getpid(), ",".join(sources)[:4096], listed),
            )

    def beat(self, name: str) -> bool:
        """False when this worker's row is gone (the leader declared it dead): it must re-register."""
        with self.db.transaction() as cur:
            return bool(cur.execute(self.sql.beat, (name,)))

    def deregister(self, name: str) -> None:
        with self.db.transaction() as cur:
            cur.execute(self.sql.deregister, (name,))

    def forget(self, name: str) -> bool:
        """Remove a dead worker's row unless another session holds it locked (a stopped worker's
        open transaction): never waits for the lock. False: locked, left for the next look."""
        with self.db.transaction() as cur:
            if not cur.execute(self.sql.lock_skip, (name,)):
                cur.execute(self.sql.named, (name,))
                return cur.fetchone() is None  # gone already, or held by another session
            cur.execute(self.sql.deregister, (name,))
            return True

    def dead(self) -> list[str]:
        with self.db.transaction() as cur:
            cur.execute(self.sql.dead, (round(self.settings.dead_after_s * 1e6),))
            return [str(r[0]) for r in cur.fetchall()]

    def alive(self) -> list[LiveWorker]:
        with self.db.transaction() as cur:
            cur.execute(self.sql.alive, (round(self.settings.dead_after_s * 1e6),))
            rows = cur.fetchall()
        live: list[LiveWorker] = []
        bad: list[str] = []
        for row in rows:
            try:
                live.append(_live_worker(row))
            except (ValueError, TypeError, OverflowError) as exc:
                bad.append(f"{str(row[0])[:60]!r}: {exc}")
        self.bad_rows = bad
        if bad:
            _warn_bad_rows(self.settings.registry_table, bad)
        return live

    def served_tasks(self) -> dict[str, frozenset[str]]:
        """Job queue source ("jobs.<queue>") -> the tasks its live workers serve, over the workers
        that say (a worker too old to list its tasks is left out)."""
        out: dict[str, frozenset[str]] = {}
        for w in self.alive():
            if w.tasks is None:
                continue
            for source in w.sources.split(","):
                if is_job_queue(source):
                    out[source] = out.get(source, frozenset()) | w.tasks
        return out


def _live_worker(row: tuple[object, ...]) -> LiveWorker:
    """One registry row, checked: ValueError or TypeError naming what is wrong."""
    n, h, p, s, k, t, us = row
    if not isinstance(t, datetime) or not isinstance(us, int | float):
        raise TypeError("started_at or the heartbeat's age is not a time")
    return LiveWorker(str(n), str(h), int(str(p)), str(s), t, float(us) / 1e6, _tasks(k))


def _tasks(listed: object) -> frozenset[str] | None:
    """`tasks`: NULL (a worker too old to say) or a JSON list of task names."""
    if listed is None:
        return None
    text = listed.decode() if isinstance(listed, bytes) else str(listed)
    if len(text) > MAX_TASKS_TEXT:
        raise ValueError(f"tasks is {len(text):,} characters long")
    try:
        names = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise ValueError("tasks is not JSON") from exc
    if not isinstance(names, list) or not all(isinstance(x, str) for x in names):
        raise ValueError("tasks is not a JSON list of task names")
    return frozenset(names)


def bad_rows_line(bad: list[str]) -> str:
    """What status and the dashboard show for the rows alive() skipped."""
    listed = "; ".join(bad[:3]) + (f"; and {len(bad) - 3} more" if len(bad) > 3 else "")
    return f"{len(bad)} malformed worker registry row(s) skipped, counted as no worker: {listed}"


def _warn_bad_rows(table: str, bad: list[str]) -> None:
    now = time.monotonic()
    if now - _warned.get(table, -BAD_ROWS_WARN_S) < BAD_ROWS_WARN_S:
        return
    _warned[table] = now
    log.warning(
        "%s: %s (the worker account wrote what no duecast worker writes; delete the row)",
        table,
        bad_rows_line(bad),
        extra={"event": "workers.bad_rows", "count": len(bad)},
    )


class Heartbeat:
    """Registers this process, beats every heartbeat_s until stopped, deregisters on stop."""

    def __init__(
        self, mysql: MySQLSettings, settings: WorkerSettings, sources: list[str], tasks: Iterable[str] = ()
    ) -> None:
        self.name = worker_name()
        self.registry = WorkerRegistry(Database(mysql), settings)
        self.sources = sources
        self.tasks = frozenset(tasks)
        self.interval_s = settings.heartbeat_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="duecast-heartbeat", daemon=True)

    def start(self) -> None:
        """Register and start beating; the caller checks the table first (`registry.verify`)."""
        try:
            self.registry.register(self.name, self.sources, self.tasks)
        except MYSQL_ERRORS as exc:  # the beats retry; a worker does not fail for it
            log.warning("could not register worker %s yet: %s", self.name, exc)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                if not self.registry.beat(self.name):
                    self.registry.register(self.name, self.sources, self.tasks)
            except MYSQL_ERRORS as exc:
                log.warning("heartbeat of worker %s failed: %s", self.name, exc)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        try:
            self.registry.deregister(self.name)
        except MYSQL_ERRORS as exc:
            log.warning("could not deregister worker %s (the leader will): %s", self.name, exc)
        self.registry.db.close()
