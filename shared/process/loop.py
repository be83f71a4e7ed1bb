"""The one loop every role runs: call `tick()`, sleep the delay it returns, stop on request.

Sleeping is an Event wait, so SIGTERM ends it at once. `drain=True` exits at the first idle tick:
tests and one-shot commands run the production loop, not a copy.
"""

from __future__ import annotations

import logging
import random
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from types import FrameType
from typing import Protocol

from ..fanout.protocol import QueueUnavailable
from ..policy import error_backoff_s
from ..storage.units import refuses_writes
from .bell import Bell
from .failures import log_failure

log = logging.getLogger("duecast.loop")
# While a tick's Redis is away, the backoff asks it this often whether it answers again: requeueing
# and popping resume within this of Redis coming back (not the backoff's 5-10 s), and a down Redis
# sees one cheap PING per interval per role.
PROBE_EVERY_S = 0.5
# A server that refuses writes (read-only: a failover, maintenance) is tried again at least this often:
# one refused statement per try costs it nothing, and work resumes within this of the window's end
# (issue 24.5: the 10 s cap held 2,000 users unchecked 12 s after a 20 s window).
READ_ONLY_RETRY_S = 1.0


@dataclass(frozen=True)
class Tick:
    delay_s: float  # how long to wait before the next tick
    idle: bool  # nothing was there to do (drain mode stops here)


class Role(Protocol):
    name: str

    def tick(self) -> Tick: ...


def run(
    role: Role,
    stop: threading.Event,
    *,
    drain: bool = False,
    error_base_s: float = 0.5,
    error_cap_s: float = 10.0,
    pause: Callable[[float], None] | None = None,
    on_turn: Callable[[], None] | None = None,
    probe: Callable[[], object] | None = None,
) -> None:
    """Run `role` until `stop` is set (or, draining, until it is idle). Errors back off, never exit.

    `pause(delay_s)` replaces the idle sleep when given (the dispatcher waits for a wake-up there);
    it must return within delay_s, and if it fails the loop sleeps instead. `on_turn()` is called
    at the start of every turn, failed ticks included (shared/process/health.py's liveness).
    `probe()` (the queue's PING) ends the backoff after a tick that could not reach Redis as soon
    as it returns without raising, tried every PROBE_EVERY_S: the backoff spares a down Redis,
    not one that answers again.
    """
    rng = random.Random()
    failures = 0
    redis_away = False
    while not stop.is_set():
        if on_turn is not None:
            on_turn()
        try:
            result = role.tick()
            failures = 0
        except Exception as exc:
            failures += 1
            redis_away = isinstance(exc, QueueUnavailable)
            cap_s = min(error_cap_s, READ_ONLY_RETRY_S) if refuses_writes(exc) else error_cap_s
            delay = error_backoff_s(failures, error_base_s, cap_s, rng)
            log_failure(
                log,
                exc,
                "%s: tick failed (%d in a row); retrying in %.2fs",
                role.name,
                failures,
                delay,
                event="loop.tick_failed",
                role=role.name,
            )
            result = Tick(delay, idle=False)
        if drain and result.idle:
            return
        if result.delay_s > 0 and failures and redis_away and probe is not None:
            _back_off_until_answered(probe, stop, result.delay_s)
        elif result.delay_s > 0:
            # After a failure, back off with a plain sleep: the pause may need the broken server.
            _pause(pause if failures == 0 else None, stop, result.delay_s)


def stop_on_signals(stop: threading.Event) -> None:
    """SIGTERM and SIGINT ask the loop to finish its current tick and return.

    The handler only rings a Bell, and a thread of its own sets `stop`: a handler that set the Event
    itself could come while the main thread held the Event's lock (inside its wait(), say) and wait
    on itself forever, a role that never stops (shared/process/bell.py)."""
    bell = Bell()

    def _handler(signum: int, _frame: FrameType | None) -> None:
        log.info(
            "received %s; finishing current work and stopping",
            signal.Signals(signum).name,
            extra={"event": "process.stopping"},
        )
        bell.ring()

    def _relay() -> None:
        bell.wait(None)
        stop.set()

    threading.Thread(target=_relay, name="duecast-stop-on-signals", daemon=True).start()
    signal.signal(signal.SIGTERM, _handler)
    signal.signal(signal.SIGINT, _handler)


def _pause(pause: Callable[[float], None] | None, stop: threading.Event, delay_s: float) -> None:
    if pause is not None and not stop.is_set():
        try:
            pause(delay_s)
            return
        except Exception:
            log.debug("pause failed; sleeping instead", exc_info=True)
    stop.wait(delay_s)


def _back_off_until_answered(probe: Callable[[], object], stop: threading.Event, delay_s: float) -> None:
    """Sleep up to delay_s, ending early once `probe()` succeeds (one try per PROBE_EVERY_S)."""
    deadline = time.monotonic() + delay_s
    while not stop.wait(min(PROBE_EVERY_S, max(0.0, deadline - time.monotonic()))):
        if time.monotonic() >= deadline:
            return
        try:
            probe()
        except Exception as exc:  # still away: the tick's failure said why, once
            log.debug("Redis does not answer yet: %s", exc)
            continue
        log.debug("Redis answers again; retrying now")
        return
