"""Turns a flight's finished outcomes into fenced acks and fails as they come, in small batches
(shared.policy.ack_now), and asks stores to settle what waits on time. Counts go to Stats; an ack
the database could not take keeps its outcomes (their rows stay leased) and is tried again after a
backoff; one some ack of it spoilt is split, and that ack fails its own row alone.
"""

from __future__ import annotations

import logging
import random
import time
from collections import Counter
from typing import cast

from ..shared.acks import Ack, Row
from ..shared.api.outcomes import InvalidAck, TimedOut
from ..shared.limits import shown
from ..shared.policy import ack_now, error_backoff_s
from ..shared.storage.protocol import NO_ACKS, AckCounts
from ..shared.storage.source_store import Store
from ..shared.storage.units import access_denied, is_transient, refuses_writes
from .flight import Flight, Outcome
from .report import log_failures

log = logging.getLogger("duecast.worker")
SETTLE_EVERY_S = 0.1  # how often a flight's store is asked to settle what waits on time


class Acker:
    def __init__(self, backoff_cap_s: float) -> None:
        self._cap_s = backoff_cap_s
        self._rng = random.Random()
        self._after = 0.0  # after a failed ack: not before this (monotonic)
        self._failures = 0
        self.unsent: dict[str, Counter[str]] = {}  # counts not yet added to Redis, per source

    def stats(self, source: str) -> Counter[str]:
        return self.unsent.setdefault(source, Counter())

    def settle(self, flights: list[Flight], now: float) -> None:
        for flight in flights:
            if now - flight.settled_at >= SETTLE_EVERY_S:
                flight.settled_at = now
                result = flight.batch.settle()
                self.stats(flight.source).update(acked=result.acked, stale_acks=result.stale)

    def flush(self, flights: list[Flight], now: float) -> None:
        if now < self._after:
            return
        for flight in flights:
            if flight.oldest_done is None:  # nothing waits to be acked (most open flights, most ticks)
                continue
            if ack_now(flight.pending, now - flight.oldest_done, flight.left):
                self.ack(flight)

    def ack(self, flight: Flight) -> None:
        done = flight.take_done()
        acks, failed = _sorted(flight.store, done)
        counts = self.stats(flight.source)
        try:
            result = flight.batch.ack(acks)
        except Exception as exc:
            if _passes(exc):
                self._failed(flight, done, exc)
                return
            try:  # not the database's state but some ack's own fault: find it, acking one at a time
                result, alone = self._one_by_one(flight, acks)
            except Exception as again:
                self._failed(flight, done, again)
                return
            failed += alone
        counts.update(acked=result.acked, stale_acks=result.stale, failed=result.refused)
        try:
            flight.batch.fail(failed)
        except Exception as exc:
            self._failed(flight, failed, exc)
            return
        self._failures = 0
        timed_out = [row for row, outcome in failed if isinstance(outcome, TimedOut)]
        # `timed out` in duecast status: past duecast's limit, or the handler's own client gave up
        client = sum(isinstance(o, TimeoutError) and not isinstance(o, TimedOut) for _, o in failed)
        counts.update(failed=len(failed), timed_out=len(timed_out) + client)
        log_failures(flight, failed, len(timed_out))

    def _one_by_one(
        self, flight: Flight, acks: list[tuple[Row, Ack]]
    ) -> tuple[AckCounts, list[tuple[Row, Outcome]]]:
        """Ack each outcome alone (every ack is fenced: one already applied counts as stale); an ack
        that raises again, with anything but an error that passes, is that row's failure alone."""
        total = NO_ACKS
        alone: list[tuple[Row, Outcome]] = []
        for row, ack in acks:
            try:
                total += flight.batch.ack([(row, ack)])
            except Exception as exc:
                if _passes(exc):
                    raise
                alone.append((row, InvalidAck(f"its ack could not be applied: {exc!r}"[:500])))
        return total, alone

    def _failed(self, flight: Flight, items: list[tuple[Row, Outcome]], exc: Exception) -> None:
        """Keep the outcomes (their rows stay RUNNING under leases) and ack them again after a backoff."""
        flight.put_back(items)
        self._failures += 1
        delay = error_backoff_s(self._failures, 0.1, self._cap_s, self._rng)
        self._after = time.monotonic() + delay
        log.warning(
            "could not ack %d outcomes of %s (%r); retrying in %.2fs",
            len(items),
            flight.source,
            exc,
            delay,
            extra={"event": "worker.ack_retried", "source": flight.source, "count": len(items)},
        )


def _sorted(
    store: Store, done: list[tuple[Row, Outcome]]
) -> tuple[list[tuple[Row, Ack]], list[tuple[Row, Outcome]]]:
    """A flight's outcomes as the acks to apply and the failures (exceptions, and Acks the store
    refuses). Per outcome only a type check and a look-up: an Ack's refusal is asked once per
    object (handlers mostly share one), and when every outcome is a good Ack, `done` itself is
    the acks (no second list)."""
    refusals: dict[int, InvalidAck | None] = {}  # by identity
    bad: list[int] = []
    good: object = None  # the last good Ack seen: the rows after it mostly share it
    for n, (_, outcome) in enumerate(done):
        if outcome is good:
            continue
        if not isinstance(outcome, Ack):
            bad.append(n)
            continue
        refused = refusals.get(id(outcome), _UNASKED)
        if refused is _UNASKED:
            refused = refusals[id(outcome)] = _refusal(store, outcome)
        if refused is not None:
            bad.append(n)
            continue
        good = outcome
    if not bad:
        return cast(list[tuple[Row, Ack]], done), []
    failing = set(bad)
    acks = [cast(tuple[Row, Ack], pair) for n, pair in enumerate(done) if n not in failing]
    failed: list[tuple[Row, Outcome]] = []
    for n in bad:
        row, outcome = done[n]
        refused = refusals.get(id(outcome)) if isinstance(outcome, Ack) else None
        failed.append((row, outcome if refused is None else refused))
    return acks, failed


_UNASKED = InvalidAck("not asked yet")  # a marker: _refusal gives None or a new InvalidAck


def _passes(exc: BaseException) -> bool:
    """Whether an ack's error is the database's state (down, a lock, a missing grant): the whole ack
    is tried again later. Anything else (a statement refused, an overflow, text the driver cannot
    encode, a bug) is some ack's own fault, found by acking one at a time: a row whose ack fails
    alone too fails, and is retried as its source retries failures. A read-only server (a failover,
    maintenance) is the database's state too: taken for each ack's own fault, its successes would
    have been recorded as failures once it took writes again."""
    return is_transient(exc) or access_denied(exc) or refuses_writes(exc)


def _refusal(store: Store, ack: Ack) -> InvalidAck | None:
    """Why the store refuses `ack` (the row then fails alone, and the log says why), or None.
    Whatever the check raises: an Ack built by hand may hold anything."""
    try:
        store.group_key(ack)
    except Exception as exc:
        return InvalidAck(f"{exc}; the ack was {shown(ack)}")
    return None
