"""Worker: pop entries while checks are in flight, start them (committed, leased), hand rows to the
runners, and ack outcomes in small fenced batches as they come: no row waits for the slowest of its
batch, and no transaction or row lock is open while a handler runs.
"""

from __future__ import annotations

import logging
import os
import random
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence

from ..shared.api.handlers import Handler
from ..shared.entries import BadEntry, Entry, decode_entry, encode_entry
from ..shared.fanout.protocol import Queue
from ..shared.policy import in_flight_cap, pop_room, too_many_stuck
from ..shared.process.loop import Tick
from ..shared.settings import WorkerSettings
from ..shared.storage.protocol import GivesBack
from ..shared.storage.source_store import SkipsLocked, Store
from ..shared.storage.units import is_transient, retry_transient
from ..shared.telemetry import observe
from .acker import STATS_EVERY_S, Acker
from .flight import Flight, TimedOut
from .report import log_locked
from .runner import Completions, LoopRunner, ThreadRunner

log = logging.getLogger("duecast.worker")
UNIT_RETRIES = 1_000  # only a backstop: worker.unit_retry_s is what limits a start's retries
WAIT_S = 0.01  # with checks in flight and nothing to pop: how long to wait for outcomes
EXIT_STUCK = 75  # too many handler threads stuck past their time limit (EX_TEMPFAIL: restart me)


def decode_batch(raws: Sequence[bytes]) -> tuple[list[Entry], list[tuple[bytes, str]], int]:
    """Valid unique entries, bad ones with their reason, and how many exact duplicates were dropped."""
    seen: set[Entry] = set()
    entries: list[Entry] = []
    bad: list[tuple[bytes, str]] = []
    for raw in raws:
        try:
            entry = decode_entry(raw)
        except BadEntry as exc:
            bad.append((raw, exc.reason))
            continue
        if entry not in seen:
            seen.add(entry)
            entries.append(entry)
    return entries, bad, len(raws) - len(bad) - len(entries)


class Worker:
    name = "worker"

    def __init__(
        self,
        stores: Mapping[str, Store],
        handlers: Mapping[str, Handler],
        queue: Queue,
        settings: WorkerSettings,
        *,
        process: str | None = None,
        leave: Callable[[int], object] = os._exit,  # tests pass a recorder
    ) -> None:
        self.stores = stores
        self.handlers = handlers
        self.queue = queue
        self.settings = settings
        self.process = process  # its name in the worker registry; None: no hold recorded
        self._leave = leave
        self._rng = random.Random()
        self.counts: Counter[str] = Counter()
        self.acker = Acker(settings.error_backoff_s)
        self._sent_at = time.monotonic()
        self.completions = Completions()
        self.threads = ThreadRunner(settings.concurrency, self.completions)
        self.loop = LoopRunner(self.completions, observe.handler_timer)
        self.flights: list[Flight] = []
        self.holding = False  # a popped batch has groups not started yet: its Redis hold stays
        self.leaving = False
        any_async = any(h.afn is not None for h in handlers.values())
        self.cap = in_flight_cap(settings.max_in_flight, settings.pop_batch, any_async)
        self.rows_per_entry = {name: s.rows_per_entry for name, s in stores.items()}

    # -- the tick ------------------------------------------------------------------------------

    def tick(self) -> Tick:
        now = time.monotonic()
        self._collect()
        self._expire(now)
        self.acker.settle(self.flights, now)
        self.acker.flush(self.flights, now)
        self._retire()
        self._send_stats(now, force=not self.flights)
        if self.leaving:
            self._leave_when_quiet()
            self.completions.wait(WAIT_S)
            return Tick(0.0, idle=False)
        alone = self.holding or any(f.exclusive for f in self.flights)  # suspects run with nothing beside
        room = 0 if alone else pop_room(self.cap, self.in_flight, self.settings.pop_batch)
        if room:
            popped = self._pop(room, block=not self.flights)
            if popped is not None:
                self._launch(*popped)
                return Tick(0.0, idle=False)
        if not self.flights:
            return Tick(0.0, idle=True)  # the pop already waited block_timeout_s
        self.completions.wait(WAIT_S)
        return Tick(0.0, idle=False)

    @property
    def in_flight(self) -> int:
        return sum(f.left + f.pending for f in self.flights)

    def finish(self, grace_s: float) -> None:
        """Stopping: pop nothing more, and ack what is in flight for at most `grace_s`. What is left
        stays RUNNING and comes back when its lease runs out."""
        deadline = time.monotonic() + grace_s
        self.holding = True  # no more pops
        while self.flights and time.monotonic() < deadline:
            try:
                self.tick()
            except Exception as exc:  # MySQL gone: the leases bring the rest back
                log.warning("while finishing in-flight work: %r", exc)
                self.completions.wait(0.5)
        if self.flights:
            log.warning(
                "stopping with %d rows still in flight; they come back when their leases run out",
                self.in_flight,
                extra={"event": "worker.stopped_in_flight", "count": self.in_flight},
            )

    def close(self) -> None:
        self.threads.close(wait=not self.threads.stuck)
        self.loop.close()

    # -- pop and start -------------------------------------------------------------------------

    def _pop(self, rows: int, *, block: bool) -> tuple[str, list[bytes]] | None:
        sources = list(self.stores)
        counts = [max(1, -(-rows // self.rows_per_entry[s])) for s in sources]
        timeout_s = self.settings.block_timeout_s if block else 0.0
        if self.process is None:
            # The plain BLMPOP takes one count for all lists: the smallest, so no pop exceeds `rows`.
            return self.queue.pop(sources, min(counts), timeout_s if block else 0.01)
        # Held from the pop on: what redelivery requeues at once if this process dies before the
        # start commits. The next pop replaces the hold, so none comes while a group waits (holding).
        return self.queue.pop_held(self.process, sources, counts, timeout_s)

    def _launch(self, source: str, raws: list[bytes]) -> None:
        entries, bad, dupes = decode_batch(raws)
        counts = self.acker.stats(source)
        counts.update(popped=len(raws), bad=len(bad), stale_entries=dupes)
        if bad:
            log.warning(
                "quarantined %d bad entries from %s (%s)",
                len(bad),
                source,
                ", ".join(sorted({r for _, r in bad})),
                extra={"event": "worker.bad_entries", "source": source, "count": len(bad)},
            )
            self.queue.quarantine(source, bad)
        if entries:
            try:
                self._start(source, entries)
            except Exception as exc:
                if is_transient(exc):  # MySQL outlasted worker.unit_retry_s; else the sweeper decides
                    self._hand_back(source, raws)
                raise  # the loop logs `tick failed` and backs off
        if not self.holding and self.process is not None:
            self.queue.release_hold(self.process)

    def _start(self, source: str, entries: Sequence[Entry], later: Sequence[Sequence[Entry]] = ()) -> None:
        """Start `entries` (committed, leased) and hand their rows to the runners."""
        store, handler = self.stores[source], self.handlers[source]
        batch = retry_transient(
            lambda: store.start(entries, handler.columns),
            what=f"start of a batch of {source}",
            redo="the start",
            retries=UNIT_RETRIES,
            log=log,
            rng=self._rng,
            cap_s=self.settings.error_backoff_s,
            event="worker.unit_retried",
            budget_s=self.settings.unit_retry_s,
        )
        counts = self.acker.stats(source)
        locked = batch.skipped_locked if isinstance(batch, SkipsLocked) else 0
        counts.update(stale_entries=batch.skipped - locked, locked_skipped=locked, started=len(batch.rows))
        if locked:
            log_locked(source, locked)
        flight = Flight(source, store, handler, batch, limit_s=_limit_s(store), later=[*batch.later, *later])
        self.holding = bool(flight.later)
        if not flight.rows:
            self._close(flight)
            return
        self.flights.append(flight)
        self._submit_waiting()

    def _submit_waiting(self) -> None:
        """Hand started rows to the runners; suspects only once nothing else is in flight (a death
        while they run must be theirs: shared.policy.blame_interruptions)."""
        for flight in self.flights:
            if flight.submitted:
                continue
            if flight.exclusive and any(f.submitted for f in self.flights):
                return
            flight.submitted = True
            self.loop.submit(flight, [i for i, a in enumerate(flight.on_loop) if a])
            self.threads.submit(flight, [i for i, a in enumerate(flight.on_loop) if not a])

    def _hand_back(self, source: str, raws: list[bytes]) -> None:
        """Put a batch whose start this worker gave up on (MySQL still failing after
        worker.unit_retry_s) back on its ready list at once. Through Redis, not MySQL: MySQL is what
        just failed, and the rows are still DISPATCHED under the attempt their entries carry, so
        whoever pops them next starts them under that fence, and an entry the sweeper has since
        requeued (a new attempt) is skipped as stale. Left alone, a live worker's rows would wait
        for the visibility timeout: redelivery takes only dead workers' holds."""
        raws = [raw for raw in raws if _decodes(raw)]  # the bad ones are quarantined already
        try:
            self.queue.push_raw(source, raws)
            if self.process is not None:
                self.queue.release_hold(self.process)
        except Exception as exc:  # Redis too: the hold stays, redelivery or the sweeper decides
            log.error(
                "could not hand back a batch of %d entries of %s: %r",
                len(raws),
                source,
                exc,
                extra={"event": "worker.hand_back_failed", "source": source, "count": len(raws)},
            )
            return
        log.warning(
            "gave up on a batch of %d entries of %s; pushed them back for another try",
            len(raws),
            source,
            extra={"event": "worker.batch_handed_back", "source": source, "count": len(raws)},
        )

    # -- outcomes ------------------------------------------------------------------------------

    def _collect(self) -> None:
        self.completions.clear()
        for flight in self.flights:
            flight.collect()

    def _expire(self, now: float) -> None:
        """Plain calls past their time limit: their rows fail now; their threads are left to end."""
        for flight in self.flights:
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

    def _retire(self) -> None:
        over = [f for f in self.flights if f.over]
        if not over:
            return
        self.flights = [f for f in self.flights if not f.over]
        for flight in over:
            self._close(flight)
            observe.batch_done("worker", flight.source, flight.started)
        self._submit_waiting()

    def _close(self, flight: Flight) -> None:
        result = flight.batch.settle()  # counts of spans a last fail() finished
        self.acker.stats(flight.source).update(acked=result.acked, stale_acks=result.stale)
        flight.batch.close()
        if not flight.later:
            return
        if self.leaving:
            # Its threads are stuck: a group started now would never run, and its rows would come
            # back only through their leases, as interrupted, blamed on whoever is left in them (a
            # lone suspect dead-lettered for a hang it never ran beside). Unstarted, they go back now.
            self.holding = False
            self._hand_back(flight.source, [encode_entry(e.id, e.attempt) for g in flight.later for e in g])
            return
        try:  # the next group of its popped batch (suspects, one group at a time)
            self._start(flight.source, flight.later[0], flight.later[1:])
        except Exception as exc:
            self.holding = False
            if is_transient(exc):
                self._hand_back(
                    flight.source, [encode_entry(e.id, e.attempt) for group in flight.later for e in group]
                )
            raise
        if not self.holding and self.process is not None:
            self.queue.release_hold(self.process)

    def _leave_when_quiet(self) -> None:
        """Leaving: once no healthy call is running, ack what came and end the process."""
        busy = sum(f.running_on_threads() for f in self.flights) + self.loop.pending
        if busy:
            return
        self._give_back_unrun()
        for flight in self.flights:
            if flight.pending:
                self.acker.ack(flight)
        self._send_stats(time.monotonic(), force=True)
        self._leave(EXIT_STUCK)

    def _give_back_unrun(self) -> None:
        """Leaving: batches started none of whose rows began (suspects waiting to run alone, queued
        behind a stuck thread) go back now rather than through their leases, which would count an
        interruption blamed on their rows (a lone suspect dead-lettered for a hang it never ran
        beside: the chaos poison test). Stores that cannot are left to their leases, as before."""
        for flight in list(self.flights):
            batch = flight.batch
            if not isinstance(batch, GivesBack) or not flight.withdraw():
                continue
            try:
                given = batch.give_back()
            except Exception as exc:  # MySQL: the leases bring them back, as before
                log.warning("could not give back a batch of %s never run: %r", flight.source, exc)
                continue
            self.flights.remove(flight)
            if flight.later:  # its groups not started either: due again now, not at the hold's look
                self._hand_back(
                    flight.source, [encode_entry(e.id, e.attempt) for g in flight.later for e in g]
                )
            log.warning(
                "leaving: gave back %d started entries of %s none of whose rows ran",
                given,
                flight.source,
                extra={"event": "worker.gave_back_unrun", "source": flight.source, "count": given},
            )

    # -- counts --------------------------------------------------------------------------------

    def _send_stats(self, now: float, *, force: bool) -> None:
        """Counts to Redis (`duecast status`), at most every STATS_EVERY_S while busy."""
        if not self.acker.unsent or (not force and now - self._sent_at < STATS_EVERY_S):
            return
        unsent, self.acker.unsent, self._sent_at = self.acker.unsent, {}, now
        for source, counts in unsent.items():
            nonzero = +counts
            self.counts.update(nonzero)
            if nonzero:
                self.queue.add_stats(source, nonzero)


def _limit_s(store: Store) -> float:
    """A call's time limit unless its task sets its own: the source's (a job queue's is jobs.timeout_s)."""
    return store.src.timeout_s


def _decodes(raw: bytes) -> bool:
    try:
        decode_entry(raw)
    except BadEntry:
        return False
    return True
