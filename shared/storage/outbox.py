"""What every writer of new work shares (Enqueuer for jobs, Publisher for topic messages): joining
the caller's transaction (transactional outbox) and waking the dispatcher after a commit."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import redis

from duecast.shared.fanout.keys import Keys
from duecast.shared.fanout.queue import REDIS_ERRORS
from duecast.shared.storage.units import Connection


class Outbox:
    """Base of the writers: `client` may be None (no wake-ups: the dispatcher's poll finds the work)."""

    client: redis.Redis | None
    keys: Keys

    @contextmanager
    def transaction(self, conn: Connection) -> Iterator[None]:
        """`with writer.transaction(conn): ...(..., conn=conn)...`: commits the caller's connection on
        success (rolls back on error), then wakes the dispatcher."""
        try:
            yield
            conn.commit()
        except BaseException:
            conn.rollback()
            raise
        self.wake()

    def wake(self) -> None:
        """Tell a dispatcher there is new work now. Best effort: the dispatcher polls anyway."""
        if self.client is None:
            return
        try:
            pipe = self.client.pipeline(transaction=False)
            pipe.lpush(self.keys.wake(), b"1")
            pipe.ltrim(self.keys.wake(), 0, 0)  # one pending wake-up is as good as many
            pipe.execute()
        except REDIS_ERRORS:
            pass  # a lost wake-up costs one poll interval, never work
