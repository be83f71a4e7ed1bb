"""Leaving: calls past their time limit fail and their threads are given up on; too many stuck threads
make the worker leave (give back what never ran, ack what came, exit EXIT_STUCK for a fresh process);
stopping drains what is in flight for a grace period. It pops and starts nothing itself.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from ..shared.api.outcomes import TimedOut
from ..shared.policy import too_many_stuck
from ..shared.process.loop import Tick
from ..shared.storage.protocol import GivesBack
from .acker import Acker
from .report import Stats
from .runner import Completions, LoopRunner, ThreadRunner
from .starting import Starter

log = logging.getLogger("duecast.worker")
EXIT_STUCK = 75  # too many handler threads stuck past their time limit (EX_TEMPFAIL: restart me)


class Leaver:
    def __init__(
        self,
        starter: Starter,
        acker: Acker,
        stats: Stats,
        runners: tuple[ThreadRunner, LoopRunner, Completions],
        leave: Callable[[int], object],
    ) -> None:
        self.starter, self.acker, self.stats = starter, acker, stats
        self.threads, self.loop, self.completions = runners
        self._leave = leave
        self.leaving = False

    def expire(self, now: float) -> None:
        """Plain calls past their time limit: their rows fail now; their threads are left to end."""
        for flight in self.starter.flights:
            late = flight.overdue(now)
            if not late:
                continue
            self.threads.given_up(len(late))
            for item in late:
                timed_out = TimedOut(flight.source, min(flight.limits[i] for i in item))
                flight.report([(i, timed_out) for i in item])
        if not self.leaving and too_many_stuck(self.threads.stuck, self.threads.concurrency):
            self.leaving = True
            log.critical(
                "%d of %d handler threads are stuck in calls past their timeout_s; finishing what can "
                "finish, then exiting (code %d) so a fresh process takes over",
                self.threads.stuck,
                self.threads.concurrency,
                EXIT_STUCK,
                extra={"event": "worker.stuck", "stuck": self.threads.stuck},
            )

    def when_quiet(self) -> None:
        """Leaving: once no healthy call is running, ack what came and end the process."""
        flights = self.starter.flights
        busy = sum(f.running_on_threads() for f in flights) + self.loop.pending
        if busy:
            return
        self.give_back_unrun()
        for flight in flights:
            if flight.pending:
                self.acker.ack(flight)
        self.stats.send(time.monotonic(), force=True)
        self._leave(EXIT_STUCK)

    def give_back_unrun(self) -> None:
        """Leaving: batches started none of whose rows began (suspects waiting to run alone, queued
        behind a stuck thread) go back now rather than through their leases, which would count an
        interruption blamed on their rows (a lone suspect dead-lettered for a hang it never ran
        beside: the chaos poison test). Stores that cannot are left to their leases, as before."""
        flights = self.starter.flights
        for flight in list(flights):
            batch = flight.batch
            if not isinstance(batch, GivesBack) or not flight.withdraw():
                continue
            try:
                given = batch.give_back()
            except Exception as exc:  # MySQL: the leases bring them back, as before
                log.warning("could not give back a batch of %s never run: %r", flight.source, exc)
                continue
            flights.remove(flight)
            if flight.later:  # its groups not started either: due again now, not at the hold's look
                self.starter.hand_back_later(flight)
            log.warning(
                "leaving: gave back %d started entries of %s none of whose rows ran",
                given,
                flight.source,
                extra={"event": "worker.gave_back_unrun", "source": flight.source, "count": given},
            )

    def finish(self, tick: Callable[[], Tick], grace_s: float) -> None:
        """Stopping: pop nothing more, and ack what is in flight for at most `grace_s`. What is left
        stays RUNNING and comes back when its lease runs out."""
        deadline = time.monotonic() + grace_s
        self.starter.holding = True  # no more pops
        flights = self.starter.flights
        while flights and time.monotonic() < deadline:
            try:
                tick()
            except Exception as exc:  # MySQL gone: the leases bring the rest back
                log.warning("while finishing in-flight work: %r", exc)
                self.completions.wait(0.5)
        if flights:
            in_flight = sum(f.left + f.pending for f in flights)
            log.warning(
                "stopping with %d rows still in flight; they come back when their leases run out",
                in_flight,
                extra={"event": "worker.stopped_in_flight", "count": in_flight},
            )
