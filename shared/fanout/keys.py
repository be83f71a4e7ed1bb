"""Every Redis key duecast uses, under one prefix: the one place a key name is spelled.

Keys carry a `{prefix}` hash tag so a source's keys stay in one Redis Cluster slot. The values stored
under them (entries, hold records) are shared/entries.py's.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Keys:
    """Key names under one prefix. `{prefix}` is a Redis Cluster hash tag."""

    prefix: str

    def ready(self, source: str) -> str:
        """List of entries dispatched for `source`, popped by workers."""
        return f"{{{self.prefix}}}:ready:{source}"

    def quarantine(self, source: str) -> str:
        """Capped list of bad entries seen by workers, for inspection."""
        return f"{{{self.prefix}}}:quarantine:{source}"

    def stats(self, source: str) -> str:
        """Hash of counters (claimed, pushed, acked, stale...) summed over all processes."""
        return f"{{{self.prefix}}}:stats:{source}"

    def inflight(self, worker: str) -> str:
        """The batch a worker popped and has not finished: a list, the source name then its entries,
        written by the same MULTI as the pop (an older release's string "<source>\n<entry> ..." still
        reads). Lets the leader requeue a dead worker's rows at once; lost with Redis, like any entry."""
        return f"{{{self.prefix}}}:inflight:{worker}"

    def started(self, worker: str) -> str:
        """A hash of the batches a worker started: batch number -> hold record ("<source>\n<entry>
        ..."), emptied at the pop after the batch is over (and the hash rewritten to the live ones
        now and then), all in the MULTI that releases a pop's hold (worker/started.py),
        for the sources whose started rows record no worker in MySQL (re-scan rows, range mode's
        spans): what its supervisor hands back the moment it exits. Expires on its own
        (started.STARTED_TTL_S); lost with Redis, the leases cover it."""
        return f"{{{self.prefix}}}:started:{worker}"

    def bell(self, source: str) -> str:
        """List of at most one token, pushed after every push to `source`'s ready list. An idle
        worker BLPOPs the bells instead of the lists, so waiting never takes an entry it has not
        recorded in its hold; a token is only a hint, and taking one loses nothing."""
        return f"{{{self.prefix}}}:bell:{source}"

    def epoch(self) -> str:
        """A canary: set once by a dispatcher; when it is gone, Redis lost its data (FLUSHALL, a
        restart without persistence, a failover to an empty replica). run_id survives FLUSHALL."""
        return f"{{{self.prefix}}}:epoch"

    def wake(self) -> str:
        """List an enqueuer pushes to after commit; a dispatcher BLPOPs it instead of sleeping."""
        return f"{{{self.prefix}}}:wake"

    def wrong_type(self, key: str, token: str) -> str:
        """Where one of the keys above is moved aside when it holds the wrong type (a string where a
        list belongs): `{prefix}:wrongtype:<its name after the prefix>:<when and a random part>`.
        Kept for inspection, with a TTL (queue.WRONG_TYPE_KEEP_S)."""
        return f"{{{self.prefix}}}:wrongtype:{key.removeprefix(f'{{{self.prefix}}}:')}:{token}"

    def source_of_ready(self, key: str | bytes) -> str:
        text = key.decode() if isinstance(key, bytes) else key
        return text.rsplit(":", 1)[1]
