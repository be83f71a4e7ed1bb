"""Limited claims: a source's or queue's claim takes at most what its fleet-wide limits allow
(shared/storage/limits.py holds the buckets), and a re-scan source asking more than its rate limit
allows is said once, with the period the limit allows. Rows are still claimed stalest first."""

from __future__ import annotations

import logging
import time

from ..shared.entries import Entry
from ..shared.limit_policy import refill_wait_s
from ..shared.storage.limits import Grant, LimitStore, limit_store
from ..shared.storage.protocol import ClaimsRuns
from ..shared.storage.source_store import Store
from ..shared.storage.units import MYSQL_ERRORS
from ..shared.telemetry.metrics import LIMIT_PERIOD

log = logging.getLogger("duecast.limits")
DEMAND_EVERY_S = 60.0  # a limited source's rows are counted at most this often (a full scan)
# A blocking pop's timeout is served at Redis's hz (10/s by default): a shorter refill wait is slept.
BLOCK_RESOLUTION_S = 0.1


class Limiter:
    """Claims for the dispatcher, through each limited store's LimitStore; `wait_s` says when the
    bucket of a store held back by its rate is worth claiming from again."""

    def __init__(self, stores: list[Store], table: str) -> None:
        self.limits: dict[str, tuple[LimitStore, str]] = {}
        for store in stores:
            found = limit_store(store, table)
            if found is not None:
                found[0].verify()  # at start-up: a table not migrated is one line, not a failing tick
                self.limits[store.src.name] = found
        self.waits: dict[str, float] = {}
        self.over: dict[str, float] = {}  # sources said to ask more than their limit: allowed period
        self._counted_at: dict[str, float] = {}

    def claim(self, store: Store, room: int) -> list[Entry]:
        """Up to `room` entries, fewer when a limit binds."""
        name = store.src.name
        found = self.limits.get(name)
        if found is None:
            return store.claim_due(room)
        lim, table = found
        grant = lim.reserve(room)
        entries: list[Entry] = []
        if grant.entries > 0:
            try:
                entries = store.claim_due(grant.entries)
            except BaseException:
                lim.abandon(grant)
                raise
        used = 0
        if grant.entries > 0:  # (a job queue's claimed_rows is its last claim's, maybe not this one's)
            used = store.claimed_rows if isinstance(store, ClaimsRuns) else len(entries) * lim.unit
        try:
            lim.settle(grant, used)
            self.waits[name] = self._wait_s(lim, grant, room)
            bound = grant.entries < room and grant.tokens is not None
            if store.src.period_s > 0 and (bound or name in self.over or name not in self._counted_at):
                self._demand(lim, table)  # at most once a minute: a count of the table
        except MYSQL_ERRORS as exc:
            # The claim is committed: its entries must be pushed, not lost with this error until the
            # visibility timeout. Unsettled, its tokens stay spent and its reservation runs out by
            # itself (under-used, never exceeded).
            log.warning(
                "source %s: claimed %d entries, then could not settle its limits (%s); pushing them",
                name,
                len(entries),
                exc,
                extra={"event": "limit.settle_failed", "source": name},
            )
        return entries

    def delay_s(self, store: Store, delay_s: float) -> float:
        """The dispatcher's next delay for `store`: no later than its bucket refills."""
        return min(delay_s, self.waits.get(store.src.name, delay_s))

    def paces(self, delay_s: float) -> bool:
        """Whether the dispatcher's next wait, `delay_s`, is a bucket's refill too short for a blocking
        pop to time (it sleeps it instead: an enqueuer's wake-up can wait that long)."""
        return delay_s < BLOCK_RESOLUTION_S and any(w <= delay_s for w in self.waits.values())

    @staticmethod
    def _wait_s(lim: LimitStore, grant: Grant, room: int) -> float:
        if grant.tokens is None or lim.rate is None or grant.entries >= room or grant.tokens >= lim.unit:
            # Not held back by the rate (by max_running, or nothing more was due): the dispatcher's
            # own pace, never a tight loop of claims that cannot take anything.
            return float("inf")
        # A quarter of the bucket (at least an entry; at most what the room takes): claiming then,
        # the bucket does not fill up to its cap while a claim's own statements run (tens of ms), so
        # no token is dropped and the rate is met, not just bounded.
        worth = min(max(float(lim.unit), lim.burst / 4), float(room * lim.unit))
        return refill_wait_s(grant.tokens, worth, lim.rate, cap_s=1.0)

    def _demand(self, lim: LimitStore, table: str) -> None:
        """Rows / period above the rate: said once (log, gauge, and the limits table for status),
        with the period the limit allows; said again when it fits once more."""
        now = time.monotonic()
        if now - self._counted_at.get(lim.name, -DEMAND_EVERY_S) < DEMAND_EVERY_S or lim.rate is None:
            return
        self._counted_at[lim.name] = now
        rows = lim.rows(table)
        asked = rows / lim.src.period_s
        allowed = rows / lim.rate if asked > lim.rate else None
        was = self.over.pop(lim.name, None)
        if allowed is not None:
            self.over[lim.name] = allowed
        LIMIT_PERIOD.labels(lim.name).set(allowed or 0.0)
        lim.note_demand(allowed)
        if allowed is not None and was is None:
            log.warning(
                "source %s: %d rows every %gs ask %.0f checks/s, above rate_limit_per_s (%g); the limit "
                "allows a period of %.1fs: each row is checked that often, stalest first",
                lim.name,
                rows,
                lim.src.period_s,
                asked,
                lim.rate,
                allowed,
                extra={"event": "limit.demand_above", "source": lim.name, "period_s": allowed},
            )
        elif allowed is None and was is not None:
            log.info(
                "source %s: demand is within rate_limit_per_s again",
                lim.name,
                extra={"event": "limit.demand_within", "source": lim.name},
            )
