"""Starting work: pop entries (into this process's hold), decode them, start them (committed, leased) as
flights, hand their rows to the runners, and start a popped batch's next group once its flight is over.
A batch whose start fails on MySQL goes back to its ready list through Redis.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Mapping, Sequence, Set

from ..shared.api.handlers import Handler
from ..shared.entries import BadEntry, Entry, decode_entry, encode_entry
from ..shared.fanout.protocol import Queue
from ..shared.settings import WorkerSettings
from ..shared.storage.protocol import NamesStarted, StartsUnnamed, StartUnknown
from ..shared.storage.source_store import SkipsLocked, Store, WorkBatch
from ..shared.storage.units import is_transient, refuses_writes, retry_transient
from ..shared.telemetry import observe
from .acker import Acker
from .flight import Flight
from .report import log_locked
from .runner import LoopRunner, ThreadRunner
from .started import StartedLog

log = logging.getLogger("duecast.worker")
PAUSED_WAIT_S = 0.2  # every source paused: look again this often (a pause is read every 0.5 s)
UNIT_RETRIES = 1_000  # only a backstop: worker.unit_retry_s is what limits a start's retries


def passing(exc: BaseException) -> bool:
    """A start failed for a reason that passes (MySQL away past worker.unit_retry_s, or read-only for
    now: a failover, maintenance): its popped batch is handed back at once, not left to the
    visibility timeout (60 s; the read-only window of issue 24 waited 74.6 s for it)."""
    return is_transient(exc) or refuses_writes(exc)


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


class Starter:
    """Owns the flights (started batches not over yet) and `holding`: a popped batch has groups not
    started yet, so its Redis hold stays and nothing more is popped."""

    def __init__(
        self,
        stores: Mapping[str, Store],
        handlers: Mapping[str, Handler],
        queue: Queue,
        settings: WorkerSettings,
        *,
        process: str | None,
        acker: Acker,
        runners: tuple[ThreadRunner, LoopRunner],
    ) -> None:
        self.stores, self.handlers, self.queue, self.settings = stores, handlers, queue, settings
        self.process = process  # its name in the worker registry; None: no hold recorded
        self.acker = acker
        self.threads, self.loop = runners
        self._rng = random.Random()
        self.flights: list[Flight] = []  # changed in place: the other parts read the same list
        self.holding = False
        # Its started records in Redis (worker/started.py); None without a registry name.
        self.started = StartedLog(queue, process) if process is not None else None
        self.rows_per_entry = {name: s.rows_per_entry for name, s in stores.items()}
        self.paused: Callable[[], Set[str]] = frozenset  # the sources an operator paused

    def serving(self) -> list[str]:
        """The sources this worker pops from now: every one served but those an operator paused."""
        paused = self.paused()
        return [s for s in self.stores if s not in paused]

    def pop(self, counts: Mapping[str, int], *, block: bool) -> tuple[str, list[bytes]] | None:
        """Pop from one of `counts`' sources at most its count of entries (shared.inflight.entries_to_pop)."""
        paused = self.paused()
        # A paused source's entries stay in Redis, not started (nothing lost: resumed, they are
        # popped then, or redelivery requeues their rows after the visibility timeout).
        sources = [s for s in counts if s not in paused]
        if not sources:
            time.sleep(min(self.settings.block_timeout_s, PAUSED_WAIT_S) if block else 0.0)
            return None
        entries = [counts[s] for s in sources]
        timeout_s = self.settings.block_timeout_s if block else 0.0
        if self.process is None:
            # The plain BLMPOP takes one count for all lists: the smallest, so no pop exceeds a room.
            return self.queue.pop(sources, min(entries), timeout_s if block else 0.01)
        # Held from the pop on: what redelivery requeues at once if this process dies before the
        # start commits. The next pop replaces the hold, so none comes while a group waits (holding).
        return self.queue.pop_held(self.process, sources, entries, timeout_s)

    def launch(self, source: str, raws: list[bytes]) -> None:
        entries, bad, dupes = decode_batch(raws)
        self.acker.stats(source).update(popped=len(raws), bad=len(bad), stale_entries=dupes)
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
                # Every entry popped valid and unique: their bytes are the started record's (a join).
                self.start(source, entries, popped=None if bad or dupes else raws)
            except Exception as exc:
                # MySQL outlasted worker.unit_retry_s, or takes no writes for now: back at the head
                # at once. Else the sweeper decides (and the next pop replaces this batch's hold).
                if passing(exc):
                    self.hand_back(source, raws)
                raise  # the loop logs `tick failed` and backs off
        self.release_hold()

    def start(
        self,
        source: str,
        entries: Sequence[Entry],
        later: Sequence[Sequence[Entry]] = (),
        *,
        popped: Sequence[bytes] | None = None,
    ) -> None:
        """Start `entries` (committed, leased) and hand their rows to the runners. `popped`: the
        entries as popped, when they are exactly `entries` (for the started record)."""
        store, handler = self.stores[source], self.handlers[source]
        unsure: list[StartUnknown[WorkBatch]] = []

        def once() -> WorkBatch:
            """A start whose COMMIT got no answer is settled by its own re-read when retried, never
            made again blind: it would skip the rows it did start, left for their lease (issue 24.5)."""
            try:
                return unsure[0].resume() if unsure else store.start(entries, handler.columns)
            except StartUnknown as exc:
                unsure[:] = [exc]
                raise

        batch = retry_transient(
            once,
            what=f"start of a batch of {source}",
            redo="the start",
            retries=UNIT_RETRIES,
            log=log,
            rng=self._rng,
            cap_s=self.settings.error_backoff_s,
            event="worker.unit_retried",
            budget_s=self.settings.unit_retry_s,
        )
        locked = batch.skipped_locked if isinstance(batch, SkipsLocked) else 0
        counts = self.acker.stats(source)
        counts.update(stale_entries=batch.skipped - locked, locked_skipped=locked, started=len(batch.rows))
        if locked:
            log_locked(source, locked)
        # A call's time limit unless its task sets its own: the source's (a job queue's is jobs.timeout_s).
        limit_s = store.src.timeout_s
        flight = Flight(source, store, handler, batch, limit_s=limit_s, later=[*batch.later, *later])
        self.holding = bool(flight.later)
        if not flight.rows:
            self.close(flight, leaving=False)
            return
        self.flights.append(flight)
        self.record_started(flight, popped)
        self.submit_waiting()

    def record_started(self, flight: Flight, popped: Sequence[bytes] | None = None) -> None:
        """A batch of rows that record no worker in MySQL (re-scan rows, spans): its record joins
        this process's started set with the release of the hold it was popped into (one MULTI,
        release_hold), so that a supervisor hands it back the moment this process exits. Per
        batch, never per row (worker/started.py); without a registry name no supervisor reads it."""
        store, batch = flight.store, flight.batch
        if self.started is None or not isinstance(store, StartsUnnamed):
            return
        if isinstance(batch, NamesStarted) and batch.entries:
            started = batch.entries
            as_popped = popped is not None and len(popped) == len(started)  # every one started
            flight.record = self.started.add(flight.source, started, popped if as_popped else None)

    def submit_waiting(self) -> None:
        """Hand started rows to the runners; suspects only once nothing else is in flight (a death
        while they run must be theirs: shared.policy.blame_interruptions)."""
        for flight in self.flights:
            if flight.submitted:
                continue
            if flight.exclusive and any(f.submitted for f in self.flights):
                return
            flight.submitted = True
            self.loop.submit(flight, flight.indexes(on_loop=True))
            self.threads.submit(flight, flight.indexes(on_loop=False))

    def retire(self, *, leaving: bool) -> None:
        """Flights whose every row is acked or failed: closed, and the runners given what waited."""
        over = [f for f in self.flights if f.over]
        if not over:
            return
        self.flights[:] = [f for f in self.flights if not f.over]
        for flight in over:
            self.close(flight, leaving=leaving)
            observe.batch_done("worker", flight.source, flight.started)
        self.submit_waiting()
        records = [f.record for f in over if f.record]
        if records and self.started is not None:  # blanked by the next pop's release
            self.started.over(records)

    def close(self, flight: Flight, *, leaving: bool) -> None:
        result = flight.batch.settle()  # counts of spans a last fail() finished
        self.acker.stats(flight.source).update(acked=result.acked, stale_acks=result.stale)
        flight.batch.close()
        if not flight.later:
            return
        if leaving:
            # Its threads are stuck: a group started now would never run, and its rows would come
            # back only through their leases, as interrupted, blamed on whoever is left in them (a
            # lone suspect dead-lettered for a hang it never ran beside). Unstarted, they go back now.
            self.holding = False
            self.hand_back_later(flight)
            return
        try:  # the next group of its popped batch (suspects, one group at a time)
            self.start(flight.source, flight.later[0], flight.later[1:])
        except Exception as exc:
            self.holding = False
            if passing(exc):
                self.hand_back_later(flight)
            raise
        self.release_hold()

    def release_hold(self) -> None:
        """Every group of the popped batch started: its hold in Redis is done with."""
        if not self.holding and self.started is not None:
            self.started.release()

    def hand_back_later(self, flight: Flight) -> None:
        """The groups of `flight`'s popped batch not started yet, back to their ready list now."""
        self.hand_back(flight.source, [encode_entry(e.id, e.attempt) for g in flight.later for e in g])

    def hand_back(self, source: str, raws: list[bytes]) -> None:
        hand_back(self.queue, self.process, source, raws)

    def hand_back_held(self) -> None:
        """This process is about to fence itself off (its lease keeper's exit, from another thread):
        what it popped and has not started (its hold in Redis) goes back to the head of its ready
        list now, not after its supervisor, the leader or the visibility timeout. Safe whatever the
        main thread is doing: the entries carry their attempt, so a row this process did start is
        skipped as stale by whoever pops it."""
        held = self.queue.held_by(self.process) if self.process is not None else None
        if held is not None:
            self.hand_back(*held)


def hand_back(queue: Queue, process: str | None, source: str, raws: list[bytes]) -> None:
    """Put a batch whose start this worker gave up on (MySQL still failing after
    worker.unit_retry_s) back at the head of its ready list at once (ahead of the backlog).
    Through Redis, not MySQL: MySQL is what just failed, and the rows are still DISPATCHED under
    the attempt their entries carry, so whoever pops them next starts them under that fence, and
    an entry the sweeper has since requeued (a new attempt) is skipped as stale. Left alone, a
    live worker's rows would wait for the visibility timeout: redelivery takes only dead
    workers' holds."""
    raws = [raw for raw in raws if _decodes(raw)]  # the bad ones are quarantined already
    try:
        queue.push_front(source, raws)  # ahead of the backlog: this work was popped once already
        if process is not None:
            queue.release_hold(process)
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


def _decodes(raw: bytes) -> bool:
    try:
        decode_entry(raw)
    except BadEntry:
        return False
    return True
