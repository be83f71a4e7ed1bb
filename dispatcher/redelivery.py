"""Redelivery: the one duty that puts dispatched work back to pending, whatever the cause.

Each tick runs the causes shared/policy.py says are due (lost, expired, interrupted, held), each
through the store method named for it; the dispatcher hands it the rows whose push Redis refused.
Owns no SQL (the stores' requeue_* methods) and no claiming (dispatcher.Dispatcher).
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence

from ..shared.entries import BadHold, Entry, encode_entry
from ..shared.fanout.protocol import NO_SOURCE, Queue
from ..shared.policy import (
    LEADER_CAUSES,
    Cause,
    interrupted_every_s,
    redelivery_backlog,
    redelivery_delay_s,
    redelivery_due,
)
from ..shared.process.loop import Tick
from ..shared.settings import Settings
from ..shared.storage.holds import requeue_hold
from ..shared.storage.leased.store import LeasedStore
from ..shared.storage.source_store import Store
from ..shared.storage.units import TransientError
from ..shared.storage.worker_registry import WorkerRegistry
from ..shared.telemetry import observe

log = logging.getLogger("duecast.redelivery")

SWEEP: tuple[Cause, ...] = ("expired", "interrupted")  # what `duecast sweeper` runs
LEADER: tuple[Cause, ...] = (*SWEEP, "held")  # what a dispatcher hosting the sweeper runs as leader

# Each sweep's scan is SKIP LOCKED, and a claim that finds fewer due rows than it asks for holds, for
# its transaction (milliseconds), a lock on the first index record past them: the head of the
# DISPATCHED or RUNNING prefix a sweep reads, even in READ COMMITTED. The interval sweeper takes such
# a row at its next tick; a one-off drain takes a few passes a moment apart instead. The "lost"
# cause runs once per loss (the canary is back after it), so it too makes SETTLE_PASSES more, at its
# next runs, over the rows dispatched before the loss was seen: one such row had waited for the
# visibility timeout after a Redis restart (tests/integration/recovery/test_locked_rows.py).
SETTLE_PASSES = 3
SETTLE_PAUSE_S = 0.05


def cadence(settings: Settings, causes: Iterable[Cause]) -> dict[Cause, float]:
    """How often each cause runs: the canary every dispatcher poll (as often as it claims), the
    sweep every sweep_interval_s, leases that ran out at least ten times per shortest lease (a
    dead or stopped worker's work is back within about its lease), the look for dead workers
    every heartbeat."""
    sweep_s = settings.dispatcher.sweep_interval_s
    every: dict[Cause, float] = {
        "lost": settings.dispatcher.poll_interval_s,
        "expired": sweep_s,
        "interrupted": interrupted_every_s(sweep_s, [s.lease_s for s in settings.all_sources()]),
        "held": settings.worker.heartbeat_s,
    }
    return {cause: every[cause] for cause in causes}


def sweeper(settings: Settings, stores: Sequence[Store], queue: Queue) -> Redelivery:
    """The sweep alone, as `duecast sweeper` runs it: no canary, no dead workers."""
    return Redelivery(stores, queue, cadence(settings, SWEEP), settings.dispatcher.sweep_batch)


def unit_noun(store: Store) -> str:
    """What a store's requeue counts: rows, ranges (range mode), jobs, or a group's messages."""
    if isinstance(store, LeasedStore):
        return f"{store.scope.noun}s"
    return "rows" if store.rows_per_entry == 1 else "ranges"


def _always() -> bool:
    return True


class Redelivery:
    name = "redelivery"

    def __init__(
        self,
        stores: Sequence[Store],
        queue: Queue,
        every_s: Mapping[Cause, float],
        batch: int,
        *,
        registry: WorkerRegistry | None = None,
        leads: Callable[[], bool] = _always,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """`every_s`: the causes this process runs and how often (`cadence`); `batch`: rows per
        store and call; `registry` finds dead workers ("held"); `leads`: whether this process may
        run the leader's causes now."""
        if not every_s or ("held" in every_s and registry is None):
            raise ValueError("redelivery needs a cause to run, and the worker registry for 'held'")
        self.stores = list(stores)
        self.queue = queue
        self.every_s = dict(every_s)
        self.batch = batch
        self.registry = registry
        self.leads = leads
        self.clock = clock
        self.last_s: dict[Cause, float] = {}  # when each cause last ran (clock); absent: never
        self.backlog: set[Cause] = set()  # causes whose last run filled a batch
        self.counts: Counter[Cause] = Counter()  # rows requeued, by cause
        self.lost_at = 0.0  # when Redis was last found to have lost its entries (clock)
        self.lost_passes = 0  # "lost" runs left that take what was dispatched before then

    def canary(self) -> Redelivery:
        """This duty's "lost" cause alone, on the same stores: the dispatcher runs it in its own
        thread before its first claim, so nothing it claims is then taken for lost."""
        alone = Redelivery(self.stores, self.queue, {"lost": self.every_s["lost"]}, self.batch)
        alone.counts = self.counts  # one tally
        return alone

    def tick(self) -> Tick:
        leader = self.leads()
        if not leader:
            self.backlog -= LEADER_CAUSES  # the new leader's own runs take over
        now = self.clock()
        for cause in redelivery_due(now, self.last_s, self.every_s, self.backlog, leader=leader):
            counts = self._run(cause)
            self.last_s[cause] = now
            if redelivery_backlog(cause, counts, self.batch):
                self.backlog.add(cause)
            else:
                self.backlog.discard(cause)
        delay = redelivery_delay_s(self.clock(), self.last_s, self.every_s, self.backlog, leader=leader)
        return Tick(delay, idle=not self.backlog)

    def drain(self, sleep: Callable[[float], None] = time.sleep) -> None:
        """Tick until no cause is left with a full batch (`duecast sweeper --once`, tests): a fresh
        one runs every cause at its first tick. Then SETTLE_PASSES more passes, SETTLE_PAUSE_S
        apart, for rows a pass skipped because another statement held them that instant."""
        while not self.tick().idle:
            pass
        for _ in range(SETTLE_PASSES):
            sleep(SETTLE_PAUSE_S)
            for cause in self.every_s:
                self._run(cause)

    def requeue(self, cause: Cause) -> int:
        """Run one cause once, due or not; returns the rows requeued."""
        return sum(self._run(cause))

    def _run(self, cause: Cause) -> list[int]:
        """One run of `cause`: rows requeued per store (one count in all for "held")."""
        if cause == "held":
            return [self._requeue_held()]
        if cause == "lost" and cause not in self.backlog:
            if self.queue.data_lost():
                self.lost_at, self.lost_passes = self.clock(), SETTLE_PASSES
            elif self.lost_passes:  # a row a claim held locked: dispatched before the loss was seen
                self.lost_passes -= 1
                return [self._requeue(cause, store, self.clock() - self.lost_at) for store in self.stores]
            else:
                return []  # the canary is there: Redis kept its entries
        return [self._requeue(cause, store) for store in self.stores]

    def _requeue(self, cause: Cause, store: Store, lost_s: float = 0.0) -> int:
        """`lost_s`: for "lost", only what was dispatched at least that long ago."""
        src = store.src
        started = time.perf_counter()
        if cause == "expired":
            n = 0
            if isinstance(store, LeasedStore):
                # Its requeue_expired would take the work whose lease ran out too, and the line
                # would call it "not acked within the visibility timeout" (60 s) when its lease
                # (15 s) ended: that work first, said as what it is.
                n = self._requeued("interrupted", store, store.requeue_interrupted(self.batch), started)
                started = time.perf_counter()
            return n + self._requeued(
                cause, store, store.requeue_expired(src.visibility_timeout_s, self.batch), started
            )
        if cause == "lost":
            return self._requeued(cause, store, store.requeue_lost(self.batch, lost_s), started)
        return self._requeued(cause, store, store.requeue_interrupted(self.batch), started)

    def _requeued(self, cause: Cause, store: Store, n: int, started: float) -> int:
        """Count, time and say `n` units of `store` requeued for `cause`; returns n."""
        if n:
            observe.batch_done("redelivery", store.src.name, started)
            self._said(cause, store, n)
            self.queue.add_stats(store.src.name, {"requeued": n})
            self.counts[cause] += n
        return n

    def _said(self, cause: Cause, store: Store, n: int) -> None:
        src, units = store.src, unit_noun(store)
        fields = {"event": f"redelivery.{cause}", "source": src.name, "count": n}
        if cause == "expired":
            fields["event"] = "sweeper.requeued"  # the name operators already alert on
            msg = "requeued %d %s of %s not acked within %.0fs"
            log.warning(msg, n, units, src.name, src.visibility_timeout_s, extra=fields)
        elif cause == "lost":
            log.warning(
                "Redis lost its entries (or its master was switched); requeued %d dispatched %s of %s",
                n,
                units,
                src.name,
                extra=fields,
            )
        else:
            log.warning("requeued %d %s of %s whose lease ran out", n, units, src.name, extra=fields)

    def _requeue_held(self) -> int:
        """Requeue the hold of every dead worker and forget the worker; returns rows requeued.

        A worker records its batch in Redis with the pop itself (Queue.pop_held) and beats in
        MySQL; one silent for worker.dead_after_s is dead, and its rows go back now (fenced on
        their attempt) instead of after the visibility timeout. Without the record (Redis lost
        it), "lost" or "expired" covers them. Each record is read on its own: Redis is not
        trusted, and one that does not parse is quarantined, not allowed to stop the others.
        """
        assert self.registry is not None  # checked in __init__
        stores = {store.src.name: store for store in self.stores}
        total = 0
        for worker in self.registry.dead():
            try:
                total += self._requeue_hold(worker, stores)
            except TransientError as exc:
                self._hold_kept(worker, exc)
                continue
            self.queue.release_hold(worker)
            self.queue.forget_started(worker)  # its started rows' leases have run out by now, or will
            self._forget(worker)
        self.counts["held"] += total
        return total

    def _forget(self, worker: str) -> None:
        """Remove a dead worker's registry row, never waiting for it: a stopped worker's open
        transaction may hold it (issue 24: that wait failed the whole tick, five times in a row).
        Locked, or a transient error: one line, and the next look tries again (its hold is released
        already, so that look only forgets it)."""
        assert self.registry is not None
        try:
            forgotten = self.registry.forget(worker)
        except TransientError as exc:
            forgotten, why = False, str(exc)
        else:
            why = "its row is locked by another session"
        if not forgotten:
            log.warning(
                "worker %s is silent, but could not be removed from the registry yet (%s); trying again "
                "in %.0fs",
                worker,
                why,
                self.every_s["held"],
                extra={"event": "redelivery.forget_retry", "worker": worker},
            )

    def _requeue_hold(self, worker: str, stores: Mapping[str, Store]) -> int:
        """Requeue what one dead worker held (shared.storage.holds); 0 when it held nothing this
        dispatcher serves."""
        try:
            done = requeue_hold(self.queue, worker, stores.get)
        except BadHold as bad:
            self._quarantine_hold(worker, bad)
            return 0
        if done is None or not done.rows:
            return 0
        log.warning(
            "worker %s is silent: requeued the %d rows of %s it held",
            worker,
            done.rows,
            done.source,
            extra={"event": "redelivery.held", "source": done.source, "count": done.rows, "worker": worker},
        )
        return done.rows

    def _hold_kept(self, worker: str, exc: TransientError) -> None:
        """One dead worker's rows could not be requeued now: locked past mysql.lock_wait_s (by an
        application's transaction: duecast's own hold a row only for a short one), or the session
        went. Its hold and its registry row stay, so the next look tries again; the other dead
        workers' rows go back now. One line, no traceback: it passes."""
        log.warning(
            "worker %s is silent, but the rows it held could not be requeued yet: %s; trying again in %.0fs",
            worker,
            exc,
            self.every_s["held"],
            extra={"event": "redelivery.held_retry", "worker": worker},
        )

    def _quarantine_hold(self, worker: str, bad: BadHold) -> None:
        """A hold record that does not say which source it is of: nothing in it can be requeued
        safely, so it is moved to the quarantine list of no source and counted (bad_holds). Its
        rows wait for the visibility timeout; every other dead worker's rows go back now."""
        log.warning(
            "worker %s is silent and its hold record in Redis does not parse (%s): moved it to %s; "
            "the rows it held are requeued after their visibility timeout",
            worker,
            bad.reason,
            self.queue.keys.quarantine(NO_SOURCE),
            extra={
                "event": "redelivery.bad_hold",
                "source": NO_SOURCE,
                "worker": worker,
                "reason": bad.reason,
            },
        )
        self.queue.quarantine(NO_SOURCE, [(bad.raw, f"hold:{worker}:{bad.reason}")])
        self.queue.add_stats(NO_SOURCE, {"bad_holds": 1})

    def push_claimed(self, store: Store, entries: Sequence[Entry]) -> None:
        """Push a claim's entries: work coming back (the claim's first `store.returning`: given back,
        requeued, retried, interrupted) to the head of the ready list, ahead of a backlog it would
        otherwise wait behind; the rest to its tail."""
        name = store.src.name
        n = min(getattr(store, "returning", 0), len(entries))  # leased stores say (LeasedStore)
        if n:
            self.queue.push_front(name, [encode_entry(e.id, e.attempt) for e in entries[:n]])
            observe.count(name, "pushed", n)
        if n < len(entries):
            self.queue.push(name, entries[n:])

    def release_unsure(self, store: Store, entries: Sequence[Entry]) -> int:
        """The entries of a claim whose COMMIT got no answer (the session killed at the COMMIT, the
        server gone) -> pending now, fenced on their attempt: if it committed they would otherwise
        wait out the visibility timeout, unpushed; if not, nothing matches. The dispatcher's next
        claim takes them again under a new attempt, so whatever of the first was pushed is stale."""
        released = store.release_unpushed(entries)
        log.warning(
            "a claim of %d entries of %s got no answer to its COMMIT; released the %d %s it had "
            "committed, for the next claim to push",
            len(entries),
            store.src.name,
            released,
            unit_noun(store),
            extra={"event": "redelivery.commit_unknown", "source": store.src.name, "count": released},
        )
        return released

    def release_unpushed(self, store: Store, entries: Sequence[Entry]) -> int:
        """Rows `store` claimed whose push Redis refused (down, OOM) -> pending now, instead of after
        the visibility timeout; a part that did land is fenced off by the next claim's bump. Runs
        in the dispatcher's thread, on its store's connection, so it is not in `counts`."""
        released = store.release_unpushed(entries)
        log.warning(
            "push to Redis failed; released %d claimed rows of %s",
            released,
            store.src.name,
            extra={"event": "redelivery.unpushed", "source": store.src.name, "count": released},
        )
        return released
