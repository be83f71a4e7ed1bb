"""What every writer of new work shares (Enqueuer for jobs, Publisher for topic messages): its own
transaction on a pooled connection (retried while it never reached its COMMIT), joining the caller's
(transactional outbox, storage.joined), async callers' writes on its threads, and waking the dispatcher
after a commit. MySQL errors come out as duecast's (storage.units), never the driver's.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

from ..errors import DuecastError
from ..fanout.client import RedisClient
from ..fanout.keys import Keys
from ..fanout.queue import wake_dispatcher
from ..settings import Settings
from .joined import joined
from .pool import Pool, Threads
from .units import Cursor, is_transient, retry_transient

T = TypeVar("T")
log = logging.getLogger("duecast.outbox")


class MisusedWriter(DuecastError, TypeError):
    """A writer used in a way it does not support (the old transaction(conn), or after close());
    nothing was written."""


class Outbox:
    """Base of the writers: `client` may be None (no wake-ups: the dispatcher's poll finds the work).
    Safe to share between threads: each write borrows a connection of the pool `db`."""

    client: RedisClient | None
    keys: Keys
    db: Pool
    retry_s: float

    def __init__(self, settings: Settings, client: RedisClient | None) -> None:
        self.db = Pool(settings.mysql)
        self.retry_s = settings.mysql.writer_retry_s  # how long a write of our own rides out MySQL
        self.client = client
        self.keys = Keys(settings.redis.key_prefix)
        self._threads: Threads | None = None
        self._threads_lock = threading.Lock()
        self._closed = False

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
    def joined(self, conn: object) -> Iterator[Cursor]:
        """A cursor in the caller's open transaction `conn` (storage.joined): nothing committed here,
        the dispatcher woken after their commit where their framework says when."""
        with joined(conn, self.wake) as cur:
            yield cur

    def transaction(self, conn: object) -> None:
        """Gone: it committed `conn`, and with it an ORM's transaction from underneath."""
        raise MisusedWriter(
            "writer.transaction(conn) is gone (it committed your transaction); pass conn= to "
            "enqueue/enqueue_many/publish inside your own transaction and commit it yourself "
            "(docs/jobs.md#transactional-outbox)"
        )

    async def off_loop(self, call: Callable[[], T]) -> T:
        """`call` (a blocking write) on one of the writer's threads, so the event loop never waits for
        MySQL. Cancelling the await does not stop a write already begun: it commits or fails alone."""
        with self._threads_lock:
            if self._closed:
                raise MisusedWriter("this writer is closed")
            if self._threads is None:
                self._threads = Threads(self.db.size)  # one connection each: none waits for another
            threads = self._threads
        result: T = await asyncio.wrap_future(threads.submit_soon(call, asyncio.get_running_loop()))
        return result

    def close(self) -> None:
        """Close the writer's connections and threads (a write still running finishes first)."""
        with self._threads_lock:
            self._closed = True
            threads, self._threads = self._threads, None
        if threads is not None:
            threads.shutdown()
        self.db.close()

    def wake(self) -> None:
        """Tell a dispatcher there is new work now: after you commit a transaction you passed as
        `conn=` through a plain driver connection (Django and SQLAlchemy wake it at their commit).
        Best effort, never raises: without it the dispatcher's poll finds the work within
        dispatcher.poll_interval_s."""
        if self.client is not None:
            wake_dispatcher(self.client, self.keys)  # a lost wake-up costs one poll interval, never work
