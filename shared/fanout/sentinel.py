"""The connection pool of a Sentinel-managed master that follows a failover within about a second
(issue 24): redis-py asks the Sentinels only when it opens a connection, so pooled ones stayed on the
old master, which takes writes until the Sentinels demote it (~8-10 s later) and then loses them.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import redis
from redis.sentinel import SentinelConnectionPool

log = logging.getLogger("duecast.queue")

# Why a check from the roles' own commands and not a daemon thread subscribed to `+switch-master`: a
# subscriber must keep a pub/sub connection to some Sentinel alive, reconnect and re-subscribe when
# that Sentinel goes, and would still miss a switch announced while it was away; it is more code to
# get right and a thread per client. The check costs at most one SENTINEL MASTERS (to the Sentinel
# that answered last, which redis-py keeps first) per second per client, and none at all between
# checks: one clock read per command.
CHECK_INTERVAL_S = 1.0
# After no Sentinel answered: a Sentinel that drops packets costs a command up to redis.socket_timeout_s
# per Sentinel, so do not pay it every second. With every Sentinel gone no failover can happen anyway.
FAILED_CHECK_INTERVAL_S = 10.0


class FollowingMasterPool(SentinelConnectionPool):
    """A SentinelConnectionPool that, at most once per CHECK_INTERVAL_S, asks the Sentinels for the
    master before handing out a connection. When they name another one, redis-py's own
    get_master_address closes the idle connections, and a connection in use is closed when released
    (owns_connection compares its address with the master's), so the next command goes to the new
    master. A check that fails (Sentinels down or naming no master yet) is logged at DEBUG and never
    fails the command: the pooled connections carry on as they would without the check."""

    clock: Callable[[], float] = staticmethod(time.monotonic)

    def __init__(self, service_name: str, sentinel_manager: Any, **kwargs: Any) -> None:
        # redis.sentinel carries no type hints, hence the ignores.
        super().__init__(service_name, sentinel_manager, **kwargs)  # type: ignore[no-untyped-call]
        self._check_lock = threading.Lock()
        self._next_check = 0.0
        # Master switches seen: what a pusher sent to the old master before its check is lost at
        # the demotion, so the dispatcher's canary (ReadyQueue.data_lost) requeues on a change.
        self.switches = 0
        self._checked: tuple[str, int] | None = None  # the master the last check found

    def get_connection(self, *args: Any, **kwargs: Any) -> Any:
        self._follow_master()
        return super().get_connection(*args, **kwargs)

    def _follow_master(self) -> None:
        now = self.clock()
        # Non-blocking: while one thread asks the Sentinels, the others go on with the pool as it is.
        if now < self._next_check or not self._check_lock.acquire(blocking=False):
            return
        try:
            self._next_check = now + CHECK_INTERVAL_S
            try:
                after = self.get_master_address()  # type: ignore[no-untyped-call]
            except (redis.ConnectionError, redis.TimeoutError) as exc:  # MasterNotFoundError is one
                self._next_check = now + FAILED_CHECK_INTERVAL_S
                log.debug("could not ask the Sentinels for the Redis master: %s", exc)
                return
            # Against the last check's answer, not the pool's master_address: a connection opened
            # meanwhile may have moved that already, and the switch must still be counted.
            before, self._checked = self._checked, after
            if before is not None and after != before:
                self.switches += 1
                line = "the Sentinels name a new Redis master %s:%s (was %s:%s): leaving the old one"
                log.info(line, *after, *before)
        finally:
            self._check_lock.release()


def master_switches(client: object) -> int:
    """How many master switches the client's pool has seen (0: not a Sentinel-managed client)."""
    return int(getattr(getattr(client, "connection_pool", None), "switches", 0))
