"""Which sources no live worker serves: the pure view, and the dispatcher's duty that logs each change
once and exports duecast_live_workers."""

from __future__ import annotations

import logging
from datetime import datetime

import pytest

from duecast.dispatcher.coverage import Coverage
from duecast.shared.monitor.coverage import label, serving, unserved
from duecast.shared.storage.worker_registry import LiveWorker
from duecast.shared.telemetry import metrics

SOURCES = ["user_block_status", "jobs.default", "jobs.mail"]


def worker(name: str, *sources: str) -> LiveWorker:
    return LiveWorker(name, "box", 1, ",".join(sources), datetime(2026, 1, 1), 0.5)


class Registry:
    def __init__(self) -> None:
        self.live: list[LiveWorker] = []

    def alive(self) -> list[LiveWorker]:
        return list(self.live)


def test_serving_counts_live_workers_by_exact_source_name() -> None:
    live = [worker("a", "jobs.default", "user_block_status"), worker("b", "jobs.default_slow")]
    assert serving(SOURCES, live) == {"user_block_status": 1, "jobs.default": 1, "jobs.mail": 0}
    assert unserved(SOURCES, live) == ["jobs.mail"]
    assert label("jobs.mail") == "queue mail (jobs.mail)"
    assert label("user_block_status") == "source user_block_status"


def test_the_duty_logs_each_change_once_after_a_grace_and_sets_the_gauge(
    caplog: pytest.LogCaptureFixture,
) -> None:
    registry, now = Registry(), [100.0]
    coverage = Coverage(registry, SOURCES, grace_s=15, clock=lambda: now[0])  # type: ignore[arg-type]
    registry.live = [worker("a", "user_block_status")]
    with caplog.at_level(logging.INFO, logger="duecast.coverage"):
        coverage.check()  # the workers may still be starting: nothing said yet
        now[0] += 14
        coverage.check()
        assert caplog.messages == []
        now[0] += 1
        for _ in range(3):  # every tick after: still only one line per source
            coverage.check()
            now[0] += 5
        registry.live.append(worker("b", "jobs.default", "jobs.mail"))
        coverage.check()
        coverage.check()
    assert caplog.messages == [
        "queue default (jobs.default): no live worker serves it; its work waits until one does",
        "queue mail (jobs.mail): no live worker serves it; its work waits until one does",
        "queue default (jobs.default): served again, by 1 live worker(s)",
        "queue mail (jobs.mail): served again, by 1 live worker(s)",
    ]
    assert [r.levelname for r in caplog.records] == ["WARNING", "WARNING", "INFO", "INFO"]
    assert metrics.LIVE_WORKERS.labels(source="jobs.mail")._value.get() == 1
    registry.live = []
    coverage.check()
    assert metrics.LIVE_WORKERS.labels(source="user_block_status")._value.get() == 0


def test_a_standby_forgets_and_exports_nothing() -> None:
    registry, leading = Registry(), [True]
    coverage = Coverage(registry, SOURCES, grace_s=0)  # type: ignore[arg-type]
    duty = coverage.duty(lambda: leading[0])
    duty()
    assert coverage.reported == set(SOURCES)
    leading[0] = False
    duty()
    assert coverage.reported == set()
    assert metrics.LIVE_WORKERS.collect()[0].samples == []
