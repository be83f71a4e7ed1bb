"""Limited claims: a source's, queue's or task's claim takes at most what its fleet-wide limits allow
(shared/storage/limits.py holds the buckets), and a re-scan source asking more than its rate limit
allows is said once, with the period the limit allows. Rows are still claimed stalest first."""

from __future__ import annotations

import logging
import time

from ..shared.entries import Entry
from ..shared.limit_policy import refill_wait_s
from ..shared.storage.leased.jobs import JobStore
from ..shared.storage.limits import Grant, LimitStore, limit_store, task_limit_stores
from ..shared.storage.protocol import ClaimsRuns
from ..shared.storage.source_store import Store
from ..shared.storage.units import MYSQL_ERRORS
from ..shared.telemetry.metrics import LIMIT_PERIOD

log = logging.getLogger("duecast.limits")
DEMAND_EVERY_S = 60.0  # a limited source's rows are counted at most this often (a full scan)


class Limiter:
    """Claims for the dispatcher, through each limited store's LimitStore; `wait_s` says when the
    bucket of a store held back by its rate is worth claiming from again."""

    def __init__(self, stores: list[Store], table: str) -> None:
        self.limits: dict[str, tuple[LimitStore, str]] = {}
        # A job queue's limited tasks (`[jobs.task_limits]`): their buckets, by task.
        self.tasks: dict[str, dict[str, LimitStore]] = {}
        for store in stores:
            found = limit_store(store, table)
            if found is not None:
                found[0].verify()  # at start-up: a table not migrated is one line, not a failing tick
                self.limits[store.src.name] = found
            tasks = task_limit_stores(store, table)
            for lim in tasks.values():
                lim.verify()
            if tasks:
                self.tasks[store.src.name] = tasks
        self.waits: dict[str, float] = {}
        self.over: dict[str, float] = {}  # sources said to ask more than their limit: allowed period
        self._counted_at: dict[str, float] = {}

    def claim(self, store: Store, room: int) -> list[Entry]:
        """Up to `room` entries, fewer when a limit binds."""
        name = store.src.name
        found = self.limits.get(name)
        tasks = self.tasks.get(name)
        if found is None and tasks is None:
            return store.claim_due(room)
        grant = found[0].reserve(room) if found is not None else None
        budget = room if grant is None else grant.entries
        granted = self._reserve_tasks(store, tasks, budget)
        reserved_at = time.monotonic()
        entries: list[Entry] = []
        if budget > 0:
            try:
                entries = store.claim_due(budget)
            except BaseException:
                for task, g in granted.items():
                    self.tasks[name][task].abandon(g)
                if found is not None and grant is not None:
                    found[0].abandon(grant)
                raise
        try:
            self._settle_tasks(store, tasks, granted, reserved_at)
            if found is not None and grant is not None:
                self._settle(store, found, grant, room, len(entries))
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

    def _settle(self, store: Store, found: tuple[LimitStore, str], grant: Grant, room: int, got: int) -> None:
        lim, table = found
        name = store.src.name
        used = 0
        if grant.entries > 0:  # (a job queue's claimed_rows is its last claim's, maybe not this one's)
            used = store.claimed_rows if isinstance(store, ClaimsRuns) else got * lim.unit
        lim.settle(grant, used)
        self.waits[name] = min(self._wait_s(lim, grant, room), self.waits.get(name, float("inf")))
        bound = grant.entries < room and grant.tokens is not None
        if store.src.period_s > 0 and (bound or name in self.over or name not in self._counted_at):
            self._demand(lim, table, store.src.period_s)  # at most once a minute: a count of the table

    def _reserve_tasks(
        self, store: Store, tasks: dict[str, LimitStore] | None, budget: int
    ) -> dict[str, Grant]:
        """Each limited task's grant for this claim (a paused one's: none), handed to the store."""
        self.waits.pop(store.src.name, None)
        if tasks is None or not isinstance(store, JobStore) or budget <= 0:
            return {}
        paused = store.paused_tasks()
        granted = {task: lim.reserve(budget) for task, lim in tasks.items() if task not in paused}
        store.task_grants = {task: g.entries for task, g in granted.items() if g.entries > 0}
        return granted

    def _settle_tasks(
        self, store: Store, tasks: dict[str, LimitStore] | None, granted: dict[str, Grant], reserved_at: float
    ) -> None:
        """What each task's share took is spent; the rest goes back. A task that took all it was
        granted while its rate held it back is claimed again when its bucket refills."""
        if tasks is None or not isinstance(store, JobStore):
            return
        name = store.src.name
        # The refill counts from the reserve: the claim's own time (tens of ms under load, as much
        # as the default bucket holds) is not waited again, so fewer tokens overflow the bucket.
        took_s = time.monotonic() - reserved_at
        for task, grant in granted.items():
            used = store.task_claimed.get(task, 0)
            tasks[task].settle(grant, used)
            if grant.entries > 0 and used >= grant.entries:  # more may be due: come back
                wait = self._wait_s(tasks[task], grant, grant.entries + 1)
            elif grant.entries == 0 and grant.tokens is not None:  # held back by its rate alone
                wait = self._wait_s(tasks[task], grant, 1)
            else:
                continue
            self.waits[name] = min(max(0.0, wait - took_s), self.waits.get(name, float("inf")))

    def delay_s(self, store: Store, delay_s: float) -> float:
        """The dispatcher's next delay for `store`: no later than its bucket refills."""
        return min(delay_s, self.waits.get(store.src.name, delay_s))

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

    def _demand(self, lim: LimitStore, table: str, period_s: float) -> None:
        """Rows / period above the rate: said once (log, gauge, and the limits table for status),
        with the period the limit allows; said again when it fits once more."""
        now = time.monotonic()
        if now - self._counted_at.get(lim.name, -DEMAND_EVERY_S) < DEMAND_EVERY_S or lim.rate is None:
            return
        self._counted_at[lim.name] = now
        rows = lim.rows(table)
        asked = rows / period_s
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
                period_s,
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
