"""Workers' started records: the batches of re-scan rows and range-mode spans a worker has started
and not finished, one hold record each, in a set per worker (Keys.started). Those rows record no
worker in MySQL, so this is how a supervisor knows what its exited child held (worker/handback.py).

A hint only, like a hold: every record is fenced on (id, attempt) and RUNNING when used, so a stale
or lost one costs nothing but the lease the rows would have waited for anyway. No SQL here.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from ..entries import BadHold, decode_hold
from .client import RedisClient, translating
from .keys import Keys
from .protocol import NO_SOURCE
from .retype import Retyper

log = logging.getLogger("duecast.queue")

# A started set outlives its worker by at most this (refreshed at each batch it adds): a worker that
# exits without finishing its batches (grace ran out) and is never handed back leaves nothing behind.
# A record that expired under a batch running longer costs only that batch's lease at a kill.
STARTED_TTL_S = 86_400


class StartedRecords:
    """ReadyQueue's part for started records and the release of a hold (which may add one)."""

    client: RedisClient
    keys: Keys
    _retype: Retyper

    @translating
    def release_hold(self, worker: str, started: bytes = b"") -> None:
        """The popped batch is started (or handed back): its hold goes, and `started`, the record
        of what it started (entries.encode_hold), joins the worker's started set, in one MULTI, so
        there is no instant at which neither says those rows are the worker's."""
        hold, key = self.keys.inflight(worker), self.keys.started(worker)
        if not started:
            self.client.delete(hold)
            return

        def release() -> object:
            pipe = self.client.pipeline(transaction=True)
            pipe.sadd(key, started)
            pipe.expire(key, STARTED_TTL_S)
            pipe.delete(hold)
            return pipe.execute()

        self._retype.call([(NO_SOURCE, key, "set")], release)

    @translating
    def drop_started(self, worker: str, records: Sequence[bytes]) -> None:
        """Batches `worker` finished (acked, failed, or left to their leases): their records go."""
        key = self.keys.started(worker)
        if records:
            self._retype.call([(NO_SOURCE, key, "set")], lambda: self.client.srem(key, *records))

    @translating
    def started_by(self, worker: str) -> list[tuple[str, list[bytes]]]:
        """(source, raw entries) of each batch `worker` recorded as started and not finished. A
        record that does not parse is skipped with one WARNING line: its rows wait for their leases."""
        key = self.keys.started(worker)
        members = self._retype.call([(NO_SOURCE, key, "set")], lambda: self.client.smembers(key))
        out = []
        for member in sorted(_b(m) for m in members):
            try:
                out.append(decode_hold(member))
            except BadHold as bad:
                log.warning(
                    "a started record of worker %s does not parse (%s); its rows wait for their leases",
                    worker,
                    bad.reason,
                    extra={"event": "queue.bad_started", "worker": worker, "reason": bad.reason},
                )
        return out

    @translating
    def forget_started(self, worker: str) -> None:
        """`worker` is gone and handed back (or its leases cover it): its started set goes."""
        self.client.delete(self.keys.started(worker))


def _b(value: object) -> bytes:
    return value if isinstance(value, bytes) else str(value).encode()
