"""The worker registry: each worker process registers, beats on its own thread and connection, and
leaves on exit; the leader dispatcher finds the silent ones. Runs shared.queries.source.WorkerSQL."""

from __future__ import annotations

import logging
import os
import socket
import threading
from dataclasses import dataclass
from datetime import datetime

from duecast.shared.queries.source import WorkerSQL, render_workers
from duecast.shared.settings import MySQLSettings, WorkerSettings
from duecast.shared.storage.db import Database
from duecast.shared.storage.units import MYSQL_ERRORS

log = logging.getLogger("duecast.workers")


def worker_name() -> str:
    """Who a worker process is: host and pid, as the registry names it and as started jobs and
    messages record it in `worker`."""
    return f"{socket.gethostname()[:100]}:{os.getpid()}"


@dataclass(frozen=True)
class LiveWorker:
    name: str
    host: str
    pid: int
    sources: str
    started_at: datetime
    silent_s: float  # since its last heartbeat


class WorkerRegistry:
    def __init__(self, db: Database, settings: WorkerSettings) -> None:
        self.db = db
        self.settings = settings
        self.sql: WorkerSQL = render_workers(settings.registry_table)

    def register(self, name: str, sources: list[str]) -> None:
        with self.db.transaction() as cur:
            cur.execute(
                self.sql.register,
                (name, socket.gethostname()[:128], os.getpid(), ",".join(sources)[:4096]),
            )

    def beat(self, name: str) -> bool:
        """False when this worker's row is gone (the leader declared it dead): it must re-register."""
        with self.db.transaction() as cur:
            return bool(cur.execute(self.sql.beat, (name,)))

    def deregister(self, name: str) -> None:
        with self.db.transaction() as cur:
            cur.execute(self.sql.deregister, (name,))

    def dead(self) -> list[str]:
        with self.db.transaction() as cur:
            cur.execute(self.sql.dead, (round(self.settings.dead_after_s * 1e6),))
            return [str(r[0]) for r in cur.fetchall()]

    def alive(self) -> list[LiveWorker]:
        with self.db.transaction() as cur:
            cur.execute(self.sql.alive, (round(self.settings.dead_after_s * 1e6),))
            rows = cur.fetchall()
        return [LiveWorker(str(n), str(h), int(p), str(s), t, float(us) / 1e6) for n, h, p, s, t, us in rows]


class Heartbeat:
    """Registers this process, beats every heartbeat_s until stopped, deregisters on stop."""

    def __init__(self, mysql: MySQLSettings, settings: WorkerSettings, sources: list[str]) -> None:
        self.name = worker_name()
        self.registry = WorkerRegistry(Database(mysql), settings)
        self.sources = sources
        self.interval_s = settings.heartbeat_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="duecast-heartbeat", daemon=True)

    def start(self) -> None:
        try:
            self.registry.register(self.name, self.sources)
        except MYSQL_ERRORS as exc:  # the beats retry; a worker does not fail for it
            log.warning("could not register worker %s yet: %s", self.name, exc)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                if not self.registry.beat(self.name):
                    self.registry.register(self.name, self.sources)
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
