"""Due rows a claim passed over as locked: counted and logged only once the same row has stayed
locked across claims for `held_s`, so duecast's own sessions' millisecond locks are never reported.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable

from ..shared.fanout.protocol import Queue
from ..shared.storage.protocol import NamesSkipped
from ..shared.storage.source_store import Store

log = logging.getLogger("duecast.dispatcher")
LOG_EVERY_S = 30.0  # rows held by another session: one log line per source at most this often


class LockedRows:
    """Why not ask the server whose lock it is: no portable, unprivileged way says. INNODB_TRX
    needs PROCESS; performance_schema.data_locks (MySQL 8.0) and connection attributes
    (session_connect_attrs) need performance_schema, off by default on MariaDB. What tells them
    apart instead is time: duecast's own locks on due, pending rows last a claim or a commit
    (another dispatcher's claim, an ack committing between a claim and its count), so the row is
    claimed at the next claim; an application's lock holds the same row claim after claim. A row
    counts once it has been passed over at every claim that looked for `held_s` (mysql.lock_wait_s:
    no duecast session waits longer for a lock)."""

    def __init__(self, queue: Queue, held_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.queue = queue
        self.held_s = held_s
        self.clock = clock
        self._since: dict[str, dict[int, float]] = {}  # source -> row id -> first passed over
        self._logged: dict[str, float] = {}  # source -> clock() of its last line
        self._counted: Counter[str] = Counter()  # held rows counted since that line

    def report(self, store: Store) -> int:
        """After a claim: count (Redis stats `locked_skipped`) and log the rows held for held_s."""
        held = self._held(store)
        if not held:
            return 0
        name = store.src.name
        self.queue.add_stats(name, {"locked_skipped": held})
        self._counted[name] += held
        now = self.clock()
        if now - self._logged.get(name, -LOG_EVERY_S) >= LOG_EVERY_S:
            log.warning(
                "%d due %s of %s held by another session's lock for over %gs were skipped by the claim "
                "(%d skips since the last such line); they are claimed once the lock is released",
                held,
                "rows" if store.rows_per_entry == 1 else "ranges",
                name,
                self.held_s,
                self._counted[name],
                extra={"event": "dispatcher.locked_skipped", "source": name, "count": held},
            )
            self._logged[name] = now
            self._counted[name] = 0
        return held

    def _held(self, store: Store) -> int:
        """The rows this claim passed over that every claim since held_s ago passed over too."""
        if not isinstance(store, NamesSkipped):
            return 0
        skipped = store.skipped_ids
        if skipped is None:  # a full claim did not look: what was known stays known
            return 0
        now = self.clock()
        before = self._since.get(store.src.name, {})
        since = {i: before.get(i, now) for i in skipped}
        self._since[store.src.name] = since
        return sum(1 for t in since.values() if now - t >= self.held_s)
