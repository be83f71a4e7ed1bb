"""Takes readings of the whole system for `duecast status` and `duecast web`: every source's snapshot
(MySQL counts, freshness, Redis list and counters), on clients of its own. Read-only.
"""

from __future__ import annotations

import logging
import threading
import time

from ..shared.fanout.queue import ReadyQueue
from ..shared.monitor.status import SourceSnapshot, mysql_snapshot, source_snapshot
from ..shared.process.runtime import build_queue, build_stores
from ..shared.settings import Settings
from ..shared.storage.source_store import Store
from .history import History, Reading

log = logging.getLogger("duecast.cli.sampler")


class Sampler:
    def __init__(self, stores: list[Store], queue: ReadyQueue) -> None:
        self.stores = stores
        self.queue = queue

    @classmethod
    def connect(cls, settings: Settings) -> Sampler:
        """Stores for every source on one new connection, verified (a missing migration fails here)."""
        return cls(build_stores(settings, settings.all_sources()), build_queue(settings))

    def read(self, *, strict: bool = True, redis: bool = True) -> Reading:
        """A reading of every source. Not strict: a source that cannot be read is left out (logged),
        so one dropped table does not blank a dashboard. `redis=False`: MySQL's side only."""
        snaps: list[SourceSnapshot] = []
        for store in self.stores:
            try:
                snaps.append(source_snapshot(store, self.queue) if redis else mysql_snapshot(store))
            except Exception as exc:
                if strict:
                    raise
                log.warning(
                    "cannot read %s: %s",
                    store.src.name,
                    exc,
                    extra={"event": "sampler.source_failed", "source": store.src.name},
                )
        return Reading(time.time(), tuple(snaps))


class SamplerThread:
    """Adds a reading to `history` every `interval_s` in a daemon thread, until closed. A failed
    reading (a server down) is logged and retried at the next interval."""

    def __init__(self, sampler: Sampler, history: History, interval_s: float) -> None:
        self._sampler = sampler
        self._history = history
        self._interval_s = interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="duecast-sampler", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def close(self, timeout_s: float = 5.0) -> None:
        self._stop.set()
        self._thread.join(timeout_s)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._history.add(self._sampler.read(strict=False))
            except Exception as exc:
                log.warning("reading failed: %s", exc, extra={"event": "sampler.failed"})
            self._stop.wait(self._interval_s)
