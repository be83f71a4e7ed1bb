"""The gauges that describe the whole system (due backlog, ready list length, in flight, oldest-due age,
freshness), set by the leading dispatcher only: workers and standby dispatchers leave them out, so a
sum over processes never counts them twice. A duty on its own connection, every health.gauges_interval_s.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from prometheus_client import Gauge

from ..shared.fanout.protocol import Queue
from ..shared.monitor.status import SourceSnapshot, source_snapshot
from ..shared.storage.source_store import Store
from ..shared.telemetry import metrics

log = logging.getLogger("duecast.gauges")

SYSTEM_GAUGES: tuple[Gauge, ...] = (
    metrics.DUE_BACKLOG,
    metrics.READY_LENGTH,
    metrics.IN_FLIGHT,
    metrics.OLDEST_DUE_AGE,
    metrics.WORST_STALENESS,
    metrics.CHECKED_IN_PERIOD,
)


class SystemGauges:
    def __init__(self, stores: list[Store], queue: Queue) -> None:
        self.stores = stores
        self.queue = queue

    def refresh(self) -> None:
        """Read every source's state and set its gauges; a source that fails keeps its last values."""
        for store in self.stores:
            try:
                snap = source_snapshot(store, self.queue)
            except Exception as exc:  # one unreadable source must not blank the others
                log.warning(
                    "gauges of %s not refreshed: %s",
                    store.src.name,
                    exc,
                    extra={"event": "gauges.refresh_failed", "source": store.src.name},
                )
                continue
            self.set(snap)

    @staticmethod
    def set(snap: SourceSnapshot) -> None:
        name = snap.name
        metrics.DUE_BACKLOG.labels(source=name).set(snap.db.due)
        metrics.READY_LENGTH.labels(source=name).set(snap.list_length)
        metrics.IN_FLIGHT.labels(source=name).set(snap.db.in_flight)
        age = snap.db.oldest_due_age_s
        metrics.OLDEST_DUE_AGE.labels(source=name).set(0.0 if age is None else max(0.0, age))
        fresh = snap.freshness
        if fresh is not None and fresh.worst_staleness_s is not None:
            metrics.WORST_STALENESS.labels(source=name).set(fresh.worst_staleness_s)
        if fresh is not None and fresh.fresh_share is not None:
            metrics.CHECKED_IN_PERIOD.labels(source=name).set(fresh.fresh_share)

    def duty(self, leading: Callable[[], bool]) -> Callable[[], None]:
        """The scheduled refresh: while this dispatcher leads it sets the gauges, and once it stands
        by it drops them, so only one process ever exports them (the leader's /metrics)."""

        def run() -> None:
            if leading():
                self.refresh()
            else:
                self.clear()

        return run

    @staticmethod
    def clear() -> None:
        """Drop every sample: a dispatcher that stops refreshing must not export stale values."""
        for gauge in SYSTEM_GAUGES:
            gauge.clear()
