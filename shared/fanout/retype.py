"""Keys of the wrong type: duecast owns every key under its prefix, so one found holding another type
(a stray SET on a ready list) is moved aside, logged and counted, and the caller carries on. It must
not decide what the key should hold: the caller says, per key.
"""

from __future__ import annotations

import logging
import secrets
import time
from collections.abc import Callable, Sequence
from typing import TypeVar

import redis

from ..telemetry import observe
from .keys import Keys

T = TypeVar("T")
WRONG_TYPE_KEEP_S = 7 * 86400  # a key moved aside for holding the wrong type is kept this long

_MOVE_TRIES = 3  # WATCH lost to another client's write this many times: leave it to the next call

log = logging.getLogger("duecast.queue")


def wrong_type(exc: BaseException) -> bool:
    """A WRONGTYPE reply, bare or as a pipeline reports it ("Command # 1 (...) of pipeline caused
    error: WRONGTYPE ..."; the last such tail is the server's, whatever the arguments held)."""
    said = str(exc).rsplit("of pipeline caused error: ", 1)[-1]
    return isinstance(exc, redis.ResponseError) and said.startswith("WRONGTYPE")


class Retyper:
    def __init__(self, client: redis.Redis, keys: Keys) -> None:
        self.client = client
        self.keys = keys

    def call(self, checks: Sequence[tuple[str, str, str]], fn: Callable[[], T]) -> T:
        """`fn()`; on WRONGTYPE, move aside each (source, key, type) that is of another type, and
        call again once. A stray SET on one of duecast's keys must not stall a source."""
        try:
            return fn()
        except redis.ResponseError as exc:
            if not wrong_type(exc):
                raise
        for source, key, kind in checks:
            self.move_aside(source, key, kind)
        return fn()

    def move_aside(self, source: str, key: str, kind: str) -> None:
        """Rename `key` to Keys.wrong_type if it is not a `kind`, log it and count it (wrong_type_keys)."""
        token = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + "-" + secrets.token_hex(3)
        aside = self.keys.wrong_type(key, token)
        found = self._rename_if_not(key, kind, aside)
        if found is None:
            return
        lost = key == self.keys.ready(source)
        if lost:
            # Whatever overwrote the list took its entries: drop the epoch canary, so the next
            # dispatcher tick requeues every dispatched row no worker holds, as after a FLUSHALL,
            # instead of leaving them to the visibility timeout.
            self.client.delete(self.keys.epoch())
        log.warning(
            "Redis key %s was a %s, not a %s: moved it aside to %s (kept %d days) and carried on%s",
            key,
            found,
            kind,
            aside,
            WRONG_TYPE_KEEP_S // 86400,
            "; its entries are gone: dispatched rows are requeued at once" if lost else "",
            extra={"event": "queue.wrong_type_key", "source": source, "key": key},
        )
        observe.record(source, {"wrong_type_keys": 1})
        try:  # best effort: the stats hash may be the very key being repaired
            self.client.hincrby(self.keys.stats(source), "wrong_type_keys", 1)
        except (redis.RedisError, redis.exceptions.RedisClusterException):
            log.debug("could not count a wrong-type key", exc_info=True)

    def _rename_if_not(self, key: str, kind: str, aside: str) -> str | None:
        """Rename `key` to `aside` (same `{prefix}` slot, with a TTL) if it exists and is not a
        `kind`; returns the type found, or None. WATCH makes the check and the rename one step
        without scripting: a key another process moved, or deleted and made again, is left alone."""
        for _ in range(_MOVE_TRIES):
            pipe = self.client.pipeline(transaction=True)
            try:
                pipe.watch(key)  # type: ignore[no-untyped-call]
                reply = pipe.type(key)
                found = reply.decode() if isinstance(reply, bytes) else str(reply)
                if found in ("none", kind):
                    return None
                pipe.multi()
                pipe.rename(key, aside)
                pipe.expire(aside, WRONG_TYPE_KEEP_S)
                pipe.execute()
                return found
            except redis.WatchError:
                continue
            finally:
                pipe.reset()  # UNWATCH when it did not come to EXEC
        return None
