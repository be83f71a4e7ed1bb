"""Keeps the leases of started work alive while its handlers run, and stops the process when it cannot:
renewals on the keeper's own thread and connection, and a watchdog thread that never touches MySQL.
What "extend" means is the store's (fenced statements); this owns the pacing, bookkeeping and exit.
"""

from __future__ import annotations

import itertools
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from ...entries import Entry
from ...policy import (
    Fence,
    LeaseTiming,
    fence_reason,
    handler_in_time,
    lease_timing,
    renewal_outcome,
    start_in_time,
)
from ...settings import MySQLSettings
from ..db import Database
from ..units import Cursor

log = logging.getLogger("duecast.leases")

EXIT_HUNG = 75  # a batch ran past its timeout (EX_TEMPFAIL: restart me)
EXIT_FENCED = 69  # a lease lost, or not confirmed in time (EX_UNAVAILABLE: restart me)
# What a process says before the watchdog ends it (os._exit runs no atexit hook): a worker hands the
# batch it popped and has not started back through Redis (worker/main.py), so that it comes back at
# once, not after its supervisor, the leader or the visibility timeout (issue 24.5). Process-wide, as
# the exit is, while each store has a keeper of its own; all of it gets LAST_WORDS_S, on a thread of
# its own: a handler may still run meanwhile, which is why it is short (its acks are fenced anyway).
LAST_WORDS_S = 0.5
_last_words: list[Callable[[], object]] = []


@contextmanager
def last_words(words: Callable[[], object]) -> Iterator[None]:
    """Within the block, `words()` runs (within LAST_WORDS_S) before a watchdog ends the process."""
    _last_words.append(words)
    try:
        yield
    finally:
        _last_words.remove(words)


def say_last_words(timeout_s: float = LAST_WORDS_S) -> None:
    """Run every `last_words` of the process, giving them `timeout_s` together; an error is logged."""
    said = threading.Event()

    def say() -> None:
        for words in list(_last_words):
            try:
                words()
            except Exception as exc:  # the exit goes ahead: the supervisor or the leader does it then
                log.warning("could not finish %r before exiting: %r", words, exc)
        said.set()

    threading.Thread(target=say, name="duecast-last-words", daemon=True).start()
    said.wait(timeout_s)


@dataclass(frozen=True)
class Extended:
    """What one renewal did: the ids whose lease it extended, and those no longer running under the
    attempt held (their lease is lost). Any other id was locked by another session: neither."""

    kept: frozenset[int]
    gone: frozenset[int]


Extend = Callable[[Database, Sequence[Entry]], Extended]


def renew_leases(
    cur: Cursor,
    entries: Sequence[Entry],
    fence: Callable[[Iterable[Entry]], str],
    *,
    lock: str,
    extend: str,
    read: str,
    extend_args: Sequence[Any] = (),
    where: Sequence[Any] = (),
) -> Extended:
    """One renewal as every store's extend function makes it, on the keeper's connection: `lock`
    the entries' rows still running under their attempt, skipping rows another session holds (this
    worker's own ack, mostly: the keeper never waits for a lock), `extend` those, and `read` (a plain
    read, waiting for nobody) which of the others still run: locked elsewhere, neither kept nor lost.
    Each statement takes `{fence}` (rendered by `fence`), then `where`; `extend` its own args first."""

    def ids(stmt: str, chosen: Iterable[Entry]) -> set[int]:
        cur.execute(stmt.format(fence=fence(chosen)), tuple(where) or None)
        return {int(r[0]) for r in cur.fetchall()}

    kept = ids(lock, entries)
    if kept:
        mine = fence(e for e in entries if e.id in kept)
        cur.execute(extend.format(fence=mine), (*extend_args, *where) or None)
    rest = [e for e in entries if e.id not in kept]
    still = ids(read, rest) if rest else set()
    return Extended(frozenset(kept), frozenset(e.id for e in rest if e.id not in still))


def keeper_settings(mysql: MySQLSettings) -> MySQLSettings:
    """The keeper's connection is cut off after mysql.lease_keeper_timeout_s connecting or reading
    (not mysql.read_timeout_s, 30 s: longer than a lease), so a stalled renewal is retried on a new
    connection while the lease lasts. Its statements skip locked rows, so no read waits for a lock."""
    timeout_s = mysql.lease_keeper_timeout_s
    return mysql.model_copy(
        update={
            "connect_timeout_s": min(mysql.connect_timeout_s, timeout_s),
            "read_timeout_s": min(mysql.read_timeout_s, timeout_s),
        }
    )


class Hold:
    """One started batch's leases as the keeper tracks them (times on time.monotonic()). Its fields
    change under the keeper's lock."""

    def __init__(
        self,
        token: int,
        entries: Sequence[Entry],
        since: float,
        timing: LeaseTiming,
        lock: threading.Condition,
    ) -> None:
        self.token = token
        self.entries = list(entries)
        # `since` was taken before the statement that set the leases: they run from its NOW(6), later.
        self.started = self.confirmed = since
        self.next_try = since + timing.renew_s
        self._timing = timing
        self.lost = False
        self.failed = 0  # renewals in a row that did not confirm (only the first is logged)
        self._finishing: set[int] = set()
        # Units this worker's own finish transaction has locked (RunBatch): while it holds them no
        # other session can take them, so a renewal that finds them locked counts them as kept.
        self._owned: set[int] = set()
        self._before_own = since  # `confirmed` when the first of them was locked
        self._lock = lock
        self._may_start_lock = (lock.acquire, lock.release)  # the underlying lock's (C) methods

    def finishing(self, ids: Iterable[int]) -> None:
        """Their ack is about to run: from now on their rows leaving RUNNING is that ack, not a loss.
        (Their leases are still extended: a transactional task's work runs inside its ack.)"""
        with self._lock:
            self._finishing.update(ids)

    def may_start(self) -> bool:
        """Whether a handler of this batch may start now: asked right before each call (shared.policy.
        handler_in_time), so a process stopped past its leases runs nothing once it resumes."""
        acquire, release = self._may_start_lock
        acquire()  # the condition's own lock, taken without its Python-level `with`: once per call
        try:
            return handler_in_time(time.monotonic(), self.confirmed, self.lost, self._timing)
        finally:
            release()

    def own(self, ids: Iterable[int]) -> None:
        """This worker's own finish transaction has locked these units (still running under the
        attempt held): a renewal skipping them is not kept from them by another session."""
        with self._lock:
            if not self._owned:
                self._before_own = self.confirmed
            self._owned.update(ids)

    def disown(self, extended_at: float | None) -> None:
        """The finish transaction that owned units is over: committed, having extended their leases
        by a statement sent at time.monotonic() = `extended_at`, or not (None: rolled back, their
        leases are as the last renewal before it left them). Confirmations counted meanwhile are
        taken back to what is proven, and the next renewal is due at once if any was unproven."""
        with self._lock:
            if not self._owned:
                return
            self._owned.clear()
            proven = self._before_own if extended_at is None else extended_at
            if proven < self.confirmed:
                self.confirmed = proven
                self.next_try = min(self.next_try, time.monotonic())
            self._lock.notify_all()  # the watchdog and the keeper time from `confirmed`

    def owned(self) -> frozenset[int]:
        """(Call under the lock.)"""
        return frozenset(self._owned)

    def needed(self) -> list[int]:
        """Ids whose lease must be confirmed: all but those being acked (call under the lock)."""
        return [e.id for e in self.entries if e.id not in self._finishing]


class LeaseKeeper:
    """Renews the leases of the batches held and fences the process off when it cannot.

    Two daemon threads, started at first use. The keeper renews each batch lease/3 after its last
    confirmation, sooner after a failure. The watchdog wakes at each batch's deadline: a lease lost,
    no renewal confirmed for 0.8 of the lease (shared.policy.fence_reason), or a batch hung past
    `timeout_s`, and it logs why and ends the process at once (os._exit: Python cannot stop a handler
    thread), so no handler runs on after another worker may have taken its work, and nothing is
    acked. It never touches MySQL, so a renewal stalled in a read cannot hold it up.
    """

    def __init__(
        self,
        extend: Extend,
        lease_s: float,
        mysql: MySQLSettings,
        what: str,
        *,
        timeout_s: float | None = None,
        stop: Callable[[int], object] = os._exit,  # tests pass a recorder
    ) -> None:
        self._extend = extend
        self._lease_s = lease_s
        self._timing: LeaseTiming = lease_timing(lease_s)
        self._mysql = mysql
        self._what = what
        self._timeout_s = timeout_s  # a batch held longer is hung: the process leaves (EXIT_HUNG)
        self._stop = stop
        self._holds: dict[int, Hold] = {}
        self._cond = threading.Condition()  # guards _holds and every Hold's mutable fields
        self._tokens = itertools.count()
        self._running = False
        self._generation = 0  # close() ends the threads of the current one

    def in_time(self, since: float) -> bool:
        """Whether work whose leases a statement sent at time.monotonic() = `since` set may start
        now (shared.policy.start_in_time): a start whose commit stalled must not run its handlers."""
        return start_in_time(time.monotonic() - since, self._timing)

    @contextmanager
    def holding(self, entries: Sequence[Entry], since: float) -> Iterator[Hold]:
        """Keep the leases of `entries`, set by a statement sent after time.monotonic() = `since`."""
        with self._cond:
            hold = Hold(next(self._tokens), entries, since, self._timing, self._cond)
            self._holds[hold.token] = hold
            if not self._running:
                self._running = True
                for target, name in ((self._keep, "duecast-lease"), (self._watch, "duecast-lease-watch")):
                    threading.Thread(target=target, args=(self._generation,), name=name, daemon=True).start()
            self._cond.notify_all()
        try:
            yield hold
        finally:
            with self._cond:
                self._holds.pop(hold.token, None)  # close() may have let it go already

    def close(self) -> None:
        """Let every batch still held go and end both threads: the store is closing. What a stopped
        worker still holds comes back when its leases run out, as it logged; and a worker served
        inside another process (an embedding app, a test) leaves no watchdog behind that would end
        that process once the leases it no longer keeps could not be renewed."""
        with self._cond:
            self._holds.clear()
            self._running = False
            self._generation += 1
            self._cond.notify_all()

    # -- the keeper thread ---------------------------------------------------------------------

    def _keep(self, generation: int) -> None:
        db = Database(keeper_settings(self._mysql))
        while True:
            hold = self._next_due(generation, idle=db.close)
            if hold is None:
                return
            sent = time.monotonic()
            try:
                result: Extended | None = self._extend(db, hold.entries)
            except Exception as exc:  # the watchdog decides what a run of failures means
                level = logging.WARNING if hold.failed == 0 else logging.DEBUG
                log.log(level, "could not extend the leases of %d %s: %r", len(hold.entries), self._what, exc)
                result = None
            self._record(hold, sent, result)

    def _next_due(self, generation: int, idle: Callable[[], None]) -> Hold | None:
        """The hold whose renewal is due, once it is; `idle()` first whenever no batch is held (the
        keeper's connection is closed then, and opened again at the next renewal: a store that
        holds nothing for long, or is dropped, keeps no session open). None once closed."""
        with self._cond:
            while True:
                if generation != self._generation:
                    idle()
                    return None
                now = time.monotonic()
                due = min(self._holds.values(), key=lambda h: h.next_try, default=None)
                if due is not None and due.next_try <= now:
                    return due
                if due is None:
                    idle()
                self._cond.wait(None if due is None else due.next_try - now)

    def _record(self, hold: Hold, sent: float, result: Extended | None) -> None:
        with self._cond:
            if hold.token not in self._holds:
                return  # the batch ended while its leases were being extended
            needed = hold.needed()
            outcome = (
                "unknown"
                if result is None
                else renewal_outcome(needed, result.kept | (hold.owned() - result.gone), result.gone)
            )
            if outcome == "confirmed":
                hold.confirmed = max(hold.confirmed, sent)
                hold.next_try = sent + self._timing.renew_s
                hold.failed = 0
                return
            hold.next_try = time.monotonic() + self._timing.retry_s
            hold.failed += 1
            if outcome == "lost":
                hold.lost = True
                self._cond.notify_all()  # the watchdog acts now
            elif result is not None and hold.failed == 1:
                log.warning(
                    "some leases of %d %s are locked by another session; retrying every %.2fs",
                    len(needed),
                    self._what,
                    self._timing.retry_s,
                )

    # -- the watchdog thread -------------------------------------------------------------------

    def _watch(self, generation: int) -> None:
        with self._cond:
            while generation == self._generation:
                now = time.monotonic()
                wake: float | None = None
                for hold in self._holds.values():
                    reason = fence_reason(
                        now,
                        confirmed=hold.confirmed,
                        started=hold.started,
                        lost=hold.lost,
                        timing=self._timing,
                        timeout_s=self._timeout_s,
                    )
                    if reason is not None:
                        self._fence(hold, reason, now)
                        return
                    due = hold.confirmed + self._timing.fence_s
                    if self._timeout_s is not None:
                        due = min(due, hold.started + self._timeout_s)
                    wake = due if wake is None else min(wake, due)
                self._cond.wait(None if wake is None else wake - now)

    def _fence(self, hold: Hold, reason: Fence, now: float) -> None:
        """Self-fencing: leave without acking. The leases run out, the sweeper counts the
        interruption, and another worker runs the work; the supervisor restarts this process."""
        n = len(hold.entries)
        if reason == "hung":
            log.critical(
                "a batch of %d %s has run longer than its timeout (%.0fs): a handler is hung; exiting "
                "(code %d) so the work runs elsewhere",
                n,
                self._what,
                self._timeout_s,
                EXIT_HUNG,
                extra={"event": "worker.hung"},
            )
            say_last_words()
            self._stop(EXIT_HUNG)
            return
        why = (
            "lost a lease: another worker may be running that work now"
            if reason == "lost"
            else f"has had no confirmed lease renewal for {now - hold.confirmed:.1f}s of its "
            f"{self._lease_s:g}s lease: it could run out before the next one"
        )
        log.critical(
            "a batch of %d %s %s; exiting (code %d) without acking, so that no handler runs on beside "
            "another worker",
            n,
            self._what,
            why,
            EXIT_FENCED,
            extra={"event": "worker.fenced", "reason": reason},
        )
        say_last_words()
        self._stop(EXIT_FENCED)
