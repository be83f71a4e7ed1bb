"""What every writer of new work shares (Enqueuer for jobs, Publisher for topic messages): its own
transaction (retried while it never reached its COMMIT), joining the caller's (transactional outbox), and
waking the dispatcher after a commit. MySQL errors come out as duecast's (storage.units), never the driver's.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from typing import TypeVar

from ..fanout.client import RedisClient
from ..fanout.keys import Keys
from ..fanout.queue import wake_dispatcher
from .db import Database
from .units import (
    DRIVER_ERRORS,
    Connection,
    Cursor,
    is_transient,
    retry_transient,
    translated,
)

T = TypeVar("T")
log = logging.getLogger("duecast.outbox")


class Outbox:
    """Base of the writers: `client` may be None (no wake-ups: the dispatcher's poll finds the work).
    `retry_s` is mysql.writer_retry_s."""

    client: RedisClient | None
    keys: Keys
    db: Database
    retry_s: float

    def on_own_connection(self, write: Callable[[Cursor], T], what: str) -> T:
        """Run `write` in a transaction of the writer's own connection and commit. A dead idle
        connection is replaced before it starts (a ping). A transient error (the server down or
        restarting, a deadlock, a lock wait timeout, a connection lost) that struck before the COMMIT
        was sent is retried for up to `retry_s`: the unit was rolled back whole, so nothing was
        written. One at the COMMIT reaches the caller: it may have landed, and writing again could
        enqueue twice."""
        committing = False

        def unit() -> T:
            nonlocal committing
            committing = False
            with self.db.transaction(check=True) as cur:
                result = write(cur)
                committing = True  # the block ends: Database.transaction sends the COMMIT
            return result

        return retry_transient(
            unit,
            what=what,
            retries=0,
            log=log,
            base_s=0.1,
            cap_s=1.0,
            retry_on=lambda exc: is_transient(exc) and not committing,
            event="outbox.retried",
            budget_s=self.retry_s,
        )

    @contextmanager
    def transaction(self, conn: Connection) -> Iterator[None]:
        """`with writer.transaction(conn): ...(..., conn=conn)...`: commits the caller's connection on
        success (rolls back on error), then wakes the dispatcher. A failed COMMIT raises duecast's
        error (TransientError: it may or may not have landed)."""
        try:
            yield
            with translated():
                conn.commit()
        except BaseException:
            # A failed rollback means the connection is gone, and the transaction with it: the
            # first error says why.
            with suppress(*DRIVER_ERRORS):
                conn.rollback()
            raise
        self.wake()

    def wake(self) -> None:
        """Tell a dispatcher there is new work now. Best effort: the dispatcher polls anyway."""
        if self.client is not None:
            wake_dispatcher(self.client, self.keys)  # a lost wake-up costs one poll interval, never work
