"""Leader election for the dispatcher's singleton duties: a lease row in MySQL, renewed, with expiry.

Not GET_LOCK: a named lock dies with its connection, so a reconnect would make two leaders for a
moment, and a stalled leader would keep it. A lease expires by the database's clock instead.
"""

from __future__ import annotations

import logging
import os
import secrets
import socket
import time

from ..shared.process.failures import log_failure
from ..shared.process.loop import Tick
from ..shared.storage.leases import LeaseStore
from ..shared.storage.units import retry_transient

log = logging.getLogger("duecast.leader")

LEADER = "dispatcher-duties"
_SAFETY = 0.8  # act as leader for at most this share of the lease left, by this process' clock
# A renewal that meets a killed session or a restarting server is tried again on a new connection
# at once (the acquire is idempotent for its holder): about 0.7 s in all, well inside lease / 3.
RENEW_RETRIES = 3


def holder_name() -> str:
    """Unique per process start: host, pid and a random part (a pid can be reused)."""
    return f"{socket.gethostname()[:100]}:{os.getpid()}:{secrets.token_hex(4)}"


class Leadership:
    """Renews the lease every lease/3 (a duty in its own loop: dispatcher/scheduler.py); `held()` says
    whether to act now.

    `held()` uses this process' monotonic clock, counting down from what the database granted
    (less a safety margin), so a leader whose renewals fail stops acting before its lease can
    expire and a standby take over: never two leaders acting at once, whatever the wall clocks say.
    A failed renewal changes nothing of that countdown: what the database granted before still
    holds, so a reconnect (a killed session, a server restart) does not cost the lease.
    """

    name = "leader"

    def __init__(self, store: LeaseStore, lease_s: float, holder: str | None = None) -> None:
        self.store = store
        self.lease_s = lease_s
        self.holder = holder or holder_name()
        self._until = 0.0  # time.monotonic() until which we may act
        self.was_leader = False

    def held(self) -> bool:
        return time.monotonic() < self._until

    def tick(self) -> Tick:
        started = time.monotonic()  # before the first try: a retried renewal counts from here
        try:
            granted = retry_transient(
                lambda: self.store.acquire(LEADER, self.holder, self.lease_s),
                what="the leader lease renewal",
                retries=RENEW_RETRIES,
                log=log,
                base_s=0.1,
                cap_s=0.5,
                event="leader.renew_retried",
            )
            self._until = started + granted * _SAFETY if granted > 0 else 0.0
        except Exception as exc:
            left = max(0.0, self._until - time.monotonic())
            # MySQL away: one line; anything else: a traceback. What was granted still holds.
            log_failure(
                log,
                exc,
                "could not renew the leader lease; %s",
                f"acting on the last renewal for {left:.1f}s more" if left else "standing by until it works",
                event="leader.renew_failed",
            )
        if self.held() != self.was_leader:
            self.was_leader = self.held()
            # Becoming leader is the normal start; losing the lease is worth a look.
            log.log(
                logging.INFO if self.was_leader else logging.WARNING,
                "%s the dispatcher leader (%s)",
                "now" if self.was_leader else "no longer",
                self.holder,
            )
        return Tick(self.lease_s / 3, idle=True)

    def resign(self) -> None:
        if self.was_leader:
            try:
                self.store.resign(LEADER, self.holder)
            except Exception:
                log.warning("could not hand the leader lease over; it expires in %.0fs", self.lease_s)
        self._until = 0.0
