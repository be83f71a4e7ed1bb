"""The dispatcher's singleton duties (sweeper, range discovery) as APScheduler interval jobs.

APScheduler runs each job in its own thread, never overlapping itself, and coalesces missed runs.
A duty that meets a transient MySQL error (its idle session killed, a server restart) runs again at
once on a new connection: every duty is a repeatable unit, run every interval anyway.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from apscheduler.schedulers.background import BackgroundScheduler

from ..shared.process.failures import log_failure
from ..shared.storage.units import retry_transient

log = logging.getLogger("duecast.scheduler")
DUTY_RETRIES = 3  # about 0.7-2 s of retries: a reconnect, not a long outage (the next interval is)


def start(stop: threading.Event, jobs: list[tuple[str, Callable[[], object], float]]) -> BackgroundScheduler:
    """Run each (name, fn, interval_s) every interval until shutdown; the caller shuts it down."""
    scheduler = BackgroundScheduler(daemon=True)
    for name, fn, interval_s in jobs:
        scheduler.add_job(
            _guarded(name, fn, stop),
            "interval",
            seconds=interval_s,
            max_instances=1,
            coalesce=True,
            id=name,
        )
    scheduler.start()
    return scheduler


def _guarded(name: str, fn: Callable[[], object], stop: threading.Event) -> Callable[[], None]:
    def job() -> None:
        if stop.is_set():
            return
        try:
            retry_transient(
                fn, what=name, redo="the duty", retries=DUTY_RETRIES, log=log, cap_s=1.0, event="duty.retried"
            )
        except Exception as exc:
            # MySQL still away after the retries: one line; anything else: a traceback.
            log_failure(
                log, exc, "%s failed; will retry at the next interval", name, event="scheduler.duty_failed"
            )

    return job
