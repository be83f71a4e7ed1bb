"""Leader duty: notice sources and job queues that no live worker serves, say so once per change
in the log, and export `duecast_live_workers{source}` (0: nobody serves it) for alerts."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from ..shared.monitor.coverage import label, serving, unserved_line
from ..shared.storage.worker_registry import WorkerRegistry
from ..shared.telemetry import metrics

log = logging.getLogger("duecast.coverage")


class Coverage:
    """A source counts as unserved once nobody has served it for `grace_s` (worker.dead_after_s),
    so a dispatcher starting a moment before its workers does not cry wolf."""

    def __init__(
        self,
        registry: WorkerRegistry,
        sources: list[str],
        grace_s: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.registry = registry
        self.sources = sources
        self.grace_s = grace_s
        self.clock = clock
        self._since: dict[str, float] = {}  # source -> when it was first seen without a worker
        self.reported: set[str] = set()  # unserved sources the log has told about

    def check(self) -> None:
        counts = serving(self.sources, self.registry.alive())
        now = self.clock()
        for source, n in counts.items():
            metrics.LIVE_WORKERS.labels(source=source).set(n)
            if n:
                self._since.pop(source, None)
            else:
                self._since.setdefault(source, now)
        unserved = {s for s, since in self._since.items() if now - since >= self.grace_s}
        for source in sorted(unserved - self.reported):
            log.warning(unserved_line(source), extra={"event": "coverage.unserved", "source": source})
        for source in sorted(self.reported - unserved):
            log.info(
                "%s: served again, by %d live worker(s)",
                label(source),
                counts[source],
                extra={"event": "coverage.served", "source": source},
            )
        self.reported = unserved

    def duty(self, leading: Callable[[], bool]) -> Callable[[], None]:
        """While this dispatcher leads: check. Standing by: forget, and export nothing (one process
        exports the gauge, as with the other system gauges)."""

        def run() -> None:
            if leading():
                self.check()
            else:
                self._since.clear()
                self.reported = set()
                metrics.LIVE_WORKERS.clear()

        return run
