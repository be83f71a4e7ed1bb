"""Workers' started records: the batches of re-scan rows and range-mode spans a worker has started
(those over since its last pop blanked at its next), one hold record each, in a hash per worker
(Keys.started). Those rows record no worker in MySQL, so this is how a supervisor knows what its
exited child held (worker/handback.py).

A hint only, like a hold: every record is fenced on (id, attempt) and RUNNING when used, so a stale
or lost one costs nothing but the lease the rows would have waited for anyway. Only commands the
least-privilege ACL grants already (HSET, HGETALL, DEL, EXPIRE, MULTI): no set commands, no HDEL.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from ..entries import BadHold, decode_hold
from .client import RedisClient, translating
from .keys import Keys
from .protocol import NO_SOURCE
from .retype import Retyper

log = logging.getLogger("duecast.queue")

# A started hash outlives its worker by at most this (refreshed at each write): a worker that exits
# without finishing its batches (grace ran out) and is never handed back leaves nothing behind. A
# record that expired under a batch running longer costs only that batch's lease at a kill.
STARTED_TTL_S = 86_400


class StartedRecords:
    """ReadyQueue's part for started records, and the release of a hold (which may add some)."""

    client: RedisClient
    keys: Keys
    _retype: Retyper

    @translating
    def release_hold(
        self, worker: str, started: Mapping[bytes, bytes] | None = None, *, replace: bool = False
    ) -> None:
        """The popped batch is started (or handed back): its hold goes and `started` (batch number
        -> record, entries.encode_hold; an empty record: that batch is over) is written to the
        worker's started hash, in one MULTI, so there is no instant at which neither says those
        rows are the worker's. `replace`: the hash becomes `started`'s non-empty records alone
        (how the worker sheds the blanks of batches long over; the ACL grants no HDEL)."""
        hold, key = self.keys.inflight(worker), self.keys.started(worker)
        if not started and not replace:
            self.client.delete(hold)
            return
        kept = {f: r for f, r in (started or {}).items() if r or not replace}

        def release() -> object:
            pipe = self.client.pipeline(transaction=True)
            if replace:
                pipe.delete(key)
            if kept:
                pipe.hset(key, mapping=_fields(kept))
                pipe.expire(key, STARTED_TTL_S)
            pipe.delete(hold)
            return pipe.execute()

        self._retype.call([(NO_SOURCE, key, "hash")], release)

    @translating
    def started_by(self, worker: str) -> list[tuple[str, list[bytes]]]:
        """(source, raw entries) of each batch `worker` recorded as started and not blanked since,
        in the order it started them. A record that does not parse is skipped with one WARNING line:
        its rows wait for their leases."""
        key = self.keys.started(worker)
        found = self._retype.call([(NO_SOURCE, key, "hash")], lambda: self.client.hgetall(key))
        out = []
        for _, record in sorted((_number(f), _b(v)) for f, v in found.items()):
            if not record:
                continue  # a batch that is over
            try:
                out.append(decode_hold(record))
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
        """`worker` is gone and handed back (or its leases cover it): its started hash goes."""
        self.client.delete(self.keys.started(worker))


def _fields(mapping: Mapping[bytes, bytes]) -> dict[Any, Any]:
    """HSET's mapping (redis-py types it as a dict of any encodable key and value)."""
    return dict(mapping)


def _b(value: object) -> bytes:
    return value if isinstance(value, bytes) else str(value).encode()


def _number(field: object) -> int:
    """A batch number (the order of the worker's starts); anything else sorts first."""
    text = _b(field)
    return int(text) if text.isdigit() and len(text) < 19 else -1
