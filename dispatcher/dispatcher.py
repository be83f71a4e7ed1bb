"""Dispatcher: per tick, for each source, claim due rows (commit), then RPUSH their entries; a claim
whose COMMIT got no answer is settled at the next tick (its rows released, fenced, and claimed again).

Owns pacing and backpressure; owns no SQL (the store), no key names (shared.fanout.keys) and no requeue
(dispatcher.redelivery, which also gets back the rows of a push Redis refused).
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable, Set

from ..shared.entries import Entry
from ..shared.fanout.protocol import Queue, QueueError
from ..shared.pace import PACE_TICK_S, paced_delay_s
from ..shared.policy import claim_room, dispatch_delay_s
from ..shared.process.loop import Tick
from ..shared.settings import DispatcherSettings
from ..shared.storage.protocol import ClaimsRuns
from ..shared.storage.source_store import Store
from ..shared.storage.units import CommitUnknown
from ..shared.telemetry import observe
from .limits import Limiter
from .locked import LockedRows
from .redelivery import Redelivery

log = logging.getLogger("duecast.dispatcher")


class Dispatcher:
    name = "dispatcher"

    def __init__(
        self,
        stores: list[Store],
        queue: Queue,
        settings: DispatcherSettings,
        redelivery: Redelivery,
        locked_held_s: float = 2.0,
        *,
        paused: Callable[[], Set[str]] = frozenset,
    ) -> None:
        self.stores = stores
        self.paused = paused  # the sources an operator paused (PauseStore.paused_or_last)
        self.queue = queue
        self.settings = settings
        self.redelivery = redelivery
        self.counts: Counter[str] = Counter()
        # Per source: the entries of claims whose COMMIT got no answer (CommitUnknown), to settle.
        self.unsure: dict[str, list[Entry]] = {}
        # Due rows passed over as locked, reported once held that long (mysql.lock_wait_s).
        self.locked = LockedRows(queue, locked_held_s)
        # Fleet-wide limits (rate_limit_per_s, max_running): claims go through the limiter.
        self.limiter = Limiter(stores, settings.limits_table)
        self.clock = time.time  # the pace's grid is on the wall clock, as its callers' seconds are

    def tick(self) -> Tick:
        for store in self.stores:
            self._settle_unsure(store)  # before any claim, paused or not: the server answers again
        paused = self.paused()
        # A paused source claims nothing: its rows stay where they are, due, until it is resumed.
        delays = [
            self.settings.poll_interval_s if store.src.name in paused else self._dispatch(store)
            for store in self.stores
        ]
        delay = min(delays, default=self.settings.poll_interval_s)
        return Tick(delay, idle=delay > 0)

    def pause(self, delay_s: float) -> None:
        """Idle wait that an enqueuer's wake-up ends at once (BLPOP, so at most delay_s), ending on
        time: the pace's grid and a rate limit's refill are shorter than Redis times a blocking pop."""
        self.queue.wait_wake(delay_s)

    def _dispatch(self, store: Store) -> float:
        src = store.src
        # A job queue's entry is a run of up to run_size jobs, and its claim_batch and high_water
        # count jobs: its list's length is weighed by that, and so is a claim's result.
        weight = store.claim_weight
        room = claim_room(self.queue.length(src.name) * weight, src.high_water, src.claim_batch)
        if room == 0:
            return self.settings.poll_interval_s  # backpressure: workers are behind
        started = time.perf_counter()
        try:
            entries = self.limiter.claim(store, room)
        except CommitUnknown as exc:
            # Its COMMIT got no answer: settled at the next tick, once the server answers (not left
            # for the visibility timeout, 60 s, if it did commit).
            self.unsure[src.name] = [*self.unsure.get(src.name, ()), *exc.claimed]
            raise
        self.locked.report(store)
        if entries:
            # Committed before pushing: if this push is lost, the rows stay DISPATCHED and
            # redelivery requeues them after the visibility timeout. Never push before commit.
            try:
                self.redelivery.push_claimed(store, entries)  # work coming back: ahead of the backlog
            except QueueError:
                # Redis refused (down, OOM): the rows go back now, not after the timeout.
                self.redelivery.release_unpushed(store, entries)
                raise
            observe.batch_done("dispatcher", src.name, started)
            claimed = store.claimed_rows if isinstance(store, ClaimsRuns) else len(entries)
            self.queue.add_stats(src.name, {"claimed": claimed})
            self.counts[src.name] += claimed
        delay = dispatch_delay_s(len(entries) * weight, room, self.settings.poll_interval_s)
        if delay > 0 and src.period_s > 0:  # a re-scan caught up: its next claim on the pace's grid
            delay = paced_delay_s(self.clock(), min(PACE_TICK_S, self.settings.poll_interval_s))
        return self.limiter.delay_s(store, delay)

    def _settle_unsure(self, store: Store) -> None:
        """A claim whose COMMIT's outcome is unknown: what it may have claimed goes back to pending
        now (fenced on its attempt: nothing if it did not commit), and this tick's claim takes it
        again under a new attempt and pushes it. Until that succeeds the tick fails and backs off."""
        unsure = self.unsure.pop(store.src.name, None)
        if unsure:
            try:
                self.redelivery.release_unsure(store, unsure)
            except BaseException:
                self.unsure[store.src.name] = unsure
                raise
