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

# Move KEYS[1] to KEYS[2] (same `{prefix}` slot) if it exists and is not of type ARGV[1]; returns
# the type found, or false. One step, so a key another process already moved (or that was
# deleted and made again, right) is left alone.
_MOVE_ASIDE = """
local t = redis.call('TYPE', KEYS[1]).ok
if t == 'none' or t == ARGV[1] then return false end
redis.call('RENAME', KEYS[1], KEYS[2])
redis.call('EXPIRE', KEYS[2], ARGV[2])
return t
"""

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
        self._script = client.register_script(_MOVE_ASIDE)

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
        found = self._script(keys=[key, aside], args=[kind, WRONG_TYPE_KEEP_S])
        if not found:
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
            found.decode() if isinstance(found, bytes) else found,
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
