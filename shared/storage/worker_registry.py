"""The worker registry: each worker process registers, beats on its own thread and connection, and
leaves on exit; the leader dispatcher finds the silent ones. Runs shared.queries.registry.WorkerSQL."""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from ..queries.registry import WorkerSQL, render_workers
from ..settings import JOBS_SOURCE, MySQLSettings, WorkerSettings
from .db import Database
from .schema import SchemaError, described, workers_migration
from .units import MYSQL_ERRORS

log = logging.getLogger("duecast.workers")


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
        return [
            LiveWorker(str(n), str(h), int(p), str(s), t, float(us) / 1e6, _tasks(k))
            for n, h, p, s, k, t, us in rows
        ]

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


def _tasks(listed: object) -> frozenset[str] | None:
    return None if listed is None else frozenset(json.loads(str(listed)))


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
