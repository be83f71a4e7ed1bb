"""Runs the dispatcher's duties (lease renewal, redelivery, ranges, schedules, pruner, topics, gauges,
coverage) under the roles' loop (shared/process/loop.py): each duty's `tick()` returns its next delay.

One thread per duty, each running the loop, rather than one loop interleaving duties by due time: a
slow duty (a full range scan, a lock waited out for mysql.lock_wait_s, a pruner's backlog) must never
delay the lease renewal, whose timeliness is what keeps one leader; threads give that isolation (as
APScheduler's pool did) with no scheduling code of ours, and each connection stays in one thread.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import TypeVar

from ..shared.process.failures import log_failure
from ..shared.process.loop import Role, Tick, run
from ..shared.storage.units import retry_transient

log = logging.getLogger("duecast.scheduler")
DUTY_RETRIES = 3  # about 0.7-2 s of retries: a reconnect, not a long outage (the next interval is)
T = TypeVar("T")


def _guarded(name: str, fn: Callable[[], T], stop: threading.Event) -> Callable[[], T | None]:
    """`fn` run again at once on a transient MySQL error (its idle session killed, a server restart),
    on a new connection: every duty is a repeatable unit. None: stopping, or failed and logged."""

    def job() -> T | None:
        if stop.is_set():
            return None
        try:
            return retry_transient(
                fn, what=name, redo="the duty", retries=DUTY_RETRIES, log=log, cap_s=1.0, event="duty.retried"
            )
        except Exception as exc:
            # MySQL still away after the retries: one line; anything else: a traceback.
            log_failure(
                log, exc, "%s failed; will retry at the next interval", name, event="scheduler.duty_failed"
            )
            return None

    return job


class Guarded:
    """A duty whose tick is retried on transient errors; a failed one runs again `every_s` later."""

    def __init__(self, duty: Role, every_s: float, stop: threading.Event) -> None:
        self.name = duty.name
        self.every_s = every_s
        self._tick = _guarded(f"duecast-{duty.name}", duty.tick, stop)

    def tick(self) -> Tick:
        done = self._tick()
        return done if done is not None else Tick(self.every_s, idle=True)


class Led:
    """A singleton duty: it runs only while this dispatcher holds the leader lease; a standby looks
    again `every_s` later."""

    def __init__(self, duty: Role, held: Callable[[], bool], every_s: float) -> None:
        self.name = duty.name
        self.duty = duty
        self.held = held
        self.every_s = every_s

    def tick(self) -> Tick:
        return self.duty.tick() if self.held() else Tick(self.every_s, idle=True)


class Every:
    """A call with no pace of its own, as a duty run every `every_s` (the gauges and the coverage
    check, whose calls themselves decide between leading and standing by)."""

    def __init__(self, name: str, call: Callable[[], object], every_s: float) -> None:
        self.name = name
        self.call = call
        self.every_s = every_s

    def tick(self) -> Tick:
        self.call()
        return Tick(self.every_s, idle=True)


class Running:
    """Duties, each in its own thread running the loop until `stop()`: then each finishes its tick and
    is joined. `drain=True` runs each until its first idle tick instead (one pass, then `join()`)."""

    def __init__(self, *, drain: bool = False) -> None:
        self.drain = drain
        self._done = threading.Event()
        self.threads: list[threading.Thread] = []

    def start(self, role: Role, *, first_s: float = 0.0, probe: Callable[[], object] | None = None) -> None:
        """Run `role`, its first tick `first_s` from now (an interval duty's first run is one interval
        away: start-up did its first pass already), or at once when draining. `probe`: the loop's
        (Redis answers again: the backoff ends)."""
        thread = threading.Thread(
            target=self._run, args=(role, first_s, probe), name=f"duecast-{role.name}", daemon=True
        )
        thread.start()
        self.threads.append(thread)

    def _run(self, role: Role, first_s: float, probe: Callable[[], object] | None) -> None:
        if self.drain or first_s <= 0 or not self._done.wait(first_s):
            run(role, self._done, drain=self.drain, probe=probe)

    def join(self) -> None:
        for thread in self.threads:
            thread.join()

    def stop(self) -> None:
        self._done.set()
        self.join()
