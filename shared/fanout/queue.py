"""ReadyQueue, the Queue port's Redis implementation: ready lists (variadic RPUSH, batched pops),
workers' holds, quarantine and counters; and the enqueuers' wake-up.

Redis holds only copies of what MySQL already says; anything here may vanish without losing work,
and a key of the wrong type (WRONGTYPE) is moved aside (retype.py) rather than left to stall a source.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Mapping, Sequence

import redis

from ..entries import Entry, decode_hold, encode_entry
from ..telemetry import observe
from .client import REDIS_ERRORS, RedisClient, translating
from .keys import Keys
from .protocol import NO_SOURCE, Queue
from .retype import Retyper, wrong_type

QUARANTINE_CAP = 1000  # newest bad entries kept for inspection
QUARANTINE_ITEM_BYTES = 256  # a 10 MB bad entry is kept as its first bytes only
_PUSH_CHUNK = 5000  # keeps one RPUSH far from Redis' argument limits
# A blocking timeout of 0 means "wait forever", and some Redis versions round a sub-millisecond
# one down to it: a wait this short is not worth a round trip anyway.
_MIN_WAIT_S = 0.01

# Pop and hold in one step: a worker killed the moment the pop returns has its entries in its
# hold, for redelivery (dispatcher/redelivery.py). Scripts cannot block, hence the bells (Keys.bell).
# KEYS: the worker's hold, its ready lists in pop order, then their bells in the same order.
# ARGV: how many entries at most from each list, then the source names, both in the same order.
# A list or bell of another type would fail the script half-way (a script is not rolled back),
# so every type is checked before any write: {0, {key indexes}} names those to move aside.
_POP_HELD = """
local n = (#KEYS - 1) / 2
local bad = {}
for k = 2, #KEYS do
  local t = redis.call('TYPE', KEYS[k]).ok
  if t ~= 'list' and t ~= 'none' then bad[#bad + 1] = k end
end
if #bad > 0 then return {0, bad} end
for i = 1, n do
  local items = redis.call('LPOP', KEYS[1 + i], ARGV[i])
  if items then
    redis.call('SET', KEYS[1], ARGV[n + i] .. '\\n' .. table.concat(items, ' '))
    -- What is left wakes the next idle worker: this pop may have taken the token that rang.
    for j = i, n do
      if redis.call('LLEN', KEYS[1 + j]) > 0 and redis.call('LLEN', KEYS[1 + n + j]) == 0 then
        redis.call('LPUSH', KEYS[1 + n + j], '1')
      end
    end
    return {i, items}
  end
end
return false
"""


class ReadyQueue:
    """The Queue port (fanout/protocol.py) over one Redis client: every public method raises duecast's
    QueueError or QueueUnavailable in place of redis-py's errors (client.translate)."""

    def __init__(self, client: RedisClient, keys: Keys) -> None:
        self.client = client
        self.keys = keys
        # EVALSHA; on NOSCRIPT (a restarted server, a failover, another cluster node) redis-py
        # loads the script and runs it then: NOSCRIPT means it did not run, so nothing is doubled.
        self._pop_held = client.register_script(_POP_HELD)
        self._retype = Retyper(client, keys)

    @translating
    def ping(self) -> None:
        self.client.ping()

    @translating
    def push(self, source: str, entries: Sequence[Entry]) -> None:
        for i in range(0, len(entries), _PUSH_CHUNK):
            chunk = entries[i : i + _PUSH_CHUNK]
            self._push_and_ring(source, [encode_entry(e.id, e.attempt) for e in chunk])
            observe.count(source, "pushed", len(chunk))  # per chunk: a failed push counts what landed

    @translating
    def push_raw(self, source: str, items: Sequence[bytes]) -> None:
        """Push raw entries as they are: a batch a worker hands back, or (fault tests) duplicate and
        malformed entries."""
        self._push_and_ring(source, items)

    @translating
    def push_front(self, source: str, items: Sequence[bytes]) -> None:
        """Push entries coming back (a batch handed back, work redelivered) to the head of the ready
        list, in their order: popped before the backlog, so interrupted work is not left behind
        thousands of fresh entries."""
        self._push_and_ring(source, items, front=True)

    def _push_and_ring(
        self, source: str, items: Sequence[bytes], *, again: bool = True, front: bool = False
    ) -> None:
        """RPUSH (LPUSH, reversed, to the `front`), then ring the source's bell, in one round trip
        (in this order: a worker woken before the entries landed would find nothing and sleep again).

        A list or bell of the wrong type is moved aside and the push made again, or only the ring
        when the RPUSH itself landed: never twice the entries."""
        ready, bell = self.keys.ready(source), self.keys.bell(source)
        pipe = self.client.pipeline(transaction=False)
        if items and front:
            pipe.lpush(ready, *reversed(items))  # LPUSH puts its last argument first
        elif items:
            pipe.rpush(ready, *items)
        pipe.lpush(bell, b"1")
        pipe.ltrim(bell, 0, 0)  # one pending token is as good as many
        results = pipe.execute(raise_on_error=False)
        errors = [r for r in results if isinstance(r, Exception)]
        if not errors:
            return
        if not again or not all(wrong_type(e) for e in errors):
            raise errors[0]
        self._retype.move_aside(source, ready, "list")
        self._retype.move_aside(source, bell, "list")
        landed = bool(items) and not isinstance(results[0], Exception)
        self._push_and_ring(source, [] if landed else items, again=False, front=front)

    @translating
    def length(self, source: str) -> int:
        ready = self.keys.ready(source)
        return int(self._retype.call([(source, ready, "list")], lambda: self.client.llen(ready)))

    @translating
    def pop(self, sources: Sequence[str], count: int, timeout_s: float) -> tuple[str, list[bytes]] | None:
        """Pop up to `count` entries from the first non-empty list, blocking at most `timeout_s`."""
        keys = [self.keys.ready(s) for s in sources]
        reply = self._retype.call(
            [(s, k, "list") for s, k in zip(sources, keys, strict=True)],
            lambda: self.client.blmpop(timeout_s, len(keys), *keys, direction="LEFT", count=count),
        )
        if not reply:
            return None
        key, items = reply
        return self.keys.source_of_ready(_b(key)), [_b(i) for i in items]

    @translating
    def pop_held(
        self, worker: str, sources: Sequence[str], count: int | Sequence[int], timeout_s: float
    ) -> tuple[str, list[bytes]] | None:
        """`pop`, recording the batch as `worker`'s hold (the next one replaces it) in the same
        script. `count` may be one per source: a range-mode entry stands for a whole span, a job's
        for one job. With every list empty it waits at most `timeout_s` on their bells, which only
        wake it: the entries stay in Redis until the script moves them into the hold."""
        counts = [count] * len(sources) if isinstance(count, int) else list(count)
        if len(counts) != len(sources) or min(counts, default=1) < 1:
            raise ValueError(f"pop_held needs a count >= 1 for each of {len(sources)} sources, not {count!r}")
        deadline = time.monotonic() + timeout_s
        bells = [self.keys.bell(s) for s in sources]
        while (popped := self._pop_into_hold(worker, sources, bells, counts)) is None:
            left = deadline - time.monotonic()
            # A token is a hint: one whose entries another worker took wakes this one for nothing.
            if left < _MIN_WAIT_S or self._wait_bells(sources, bells, left) is None:
                return None
        return popped

    def _pop_into_hold(
        self, worker: str, sources: Sequence[str], bells: list[str], counts: list[int]
    ) -> tuple[str, list[bytes]] | None:
        keys = [self.keys.inflight(worker), *(self.keys.ready(s) for s in sources), *bells]
        reply = self._pop_held(keys=keys, args=[*counts, *sources])
        if reply and int(reply[0]) == 0:  # nothing popped: move the keys of the wrong type aside
            for k in reply[1]:
                self._retype.move_aside(sources[(int(k) - 2) % len(sources)], keys[int(k) - 1], "list")
            reply = self._pop_held(keys=keys, args=[*counts, *sources])
        if not reply or int(reply[0]) == 0:
            return None
        index, items = reply
        return sources[int(index) - 1], [_b(i) for i in items]

    def _wait_bells(self, sources: Sequence[str], bells: list[str], timeout_s: float) -> object:
        checks = [(s, b, "list") for s, b in zip(sources, bells, strict=True)]
        return self._retype.call(checks, lambda: self.client.blpop(bells, timeout=timeout_s))

    @translating
    def release_hold(self, worker: str) -> None:
        self.client.delete(self.keys.inflight(worker))

    @translating
    def held_by(self, worker: str) -> tuple[str, list[bytes]] | None:
        """(source, raw entries) `worker` was holding, or None (also for a hold of the wrong type,
        which is moved aside: the other workers' holds are still read)."""
        key = self.keys.inflight(worker)
        value = self._retype.call([(NO_SOURCE, key, "string")], lambda: self.client.get(key))
        if not value:
            return None
        return decode_hold(_b(value))  # BadHold when it does not parse: the caller quarantines it

    @translating
    def data_lost(self) -> bool:
        """True when the epoch canary was missing (and is now set again): every entry this Redis
        held may be gone, so MySQL's DISPATCHED rows must be requeued. Also true on first use."""
        token = secrets.token_hex(8).encode()
        return bool(self.client.set(self.keys.epoch(), token, nx=True))

    @translating
    def eviction_policy(self) -> str | None:
        """The server's maxmemory-policy, or None when CONFIG is not allowed (managed Redis, ACL)."""
        try:
            reply = self.client.config_get("maxmemory-policy")
        except redis.ResponseError:
            return None
        value = reply.get("maxmemory-policy") if isinstance(reply, dict) else None
        return None if value is None else _b(value).decode()

    @translating
    def wait_wake(self, timeout_s: float) -> bool:
        """Block until an enqueuer's wake-up or `timeout_s`; True when woken."""
        wake = self.keys.wake()
        checks = [(NO_SOURCE, wake, "list")]
        return self._retype.call(checks, lambda: self.client.blpop([wake], timeout=timeout_s)) is not None

    @translating
    def quarantine(self, source: str, items: Sequence[tuple[bytes, str]]) -> None:
        key = self.keys.quarantine(source)

        def push() -> object:
            # One LPUSH of many values: it lands whole or not at all, so a retry never doubles it.
            pipe = self.client.pipeline(transaction=False)
            pipe.lpush(key, *(reason.encode() + b" " + raw[:QUARANTINE_ITEM_BYTES] for raw, reason in items))
            pipe.ltrim(key, 0, QUARANTINE_CAP - 1)
            return pipe.execute()

        if items:
            self._retype.call([(source, key, "list")], push)

    @translating
    def quarantined(self, source: str) -> list[bytes]:
        return [_b(i) for i in self.client.lrange(self.keys.quarantine(source), 0, -1)]

    @translating
    def add_stats(self, source: str, counts: Mapping[str, int]) -> None:
        """Add a unit of work's counts to the shared counters, and to this process's metrics first
        (those still count when Redis is down)."""
        observe.record(source, counts)
        key = self.keys.stats(source)
        fields = {field: n for field, n in counts.items() if n}
        if fields:
            self._retype.call([(source, key, "hash")], lambda: self._add_fields(key, fields))

    def _add_fields(self, key: str, fields: Mapping[str, int]) -> None:
        """HINCRBYs of one key: a hash of the wrong type fails every one, so a retry never doubles one."""
        pipe = self.client.pipeline(transaction=False)
        for field, n in fields.items():
            pipe.hincrby(key, field, n)
        pipe.execute()

    @translating
    def stats(self, source: str) -> dict[str, int]:
        key = self.keys.stats(source)
        raw = self._retype.call([(source, key, "hash")], lambda: self.client.hgetall(key))
        return {_b(k).decode(): int(v) for k, v in raw.items()}


# mypy proves here that the class satisfies the port it is wired in as (the contract tests check it
# at run time, with isinstance).
_PORT: type[Queue] = ReadyQueue


def wake_dispatcher(client: RedisClient, keys: Keys) -> None:
    """Tell a dispatcher there is new work now (what ReadyQueue.wait_wake waits for): an enqueuer's or
    publisher's wake-up after its commit. Best effort: the dispatcher polls anyway, so a lost wake-up
    costs one poll interval, never work, and no error comes out of here."""
    try:
        pipe = client.pipeline(transaction=False)
        pipe.lpush(keys.wake(), b"1")
        pipe.ltrim(keys.wake(), 0, 0)  # one pending wake-up is as good as many
        pipe.execute()
    except REDIS_ERRORS:
        pass


def _b(value: object) -> bytes:
    """redis-py types replies loosely; this client never decodes, so replies are bytes."""
    return value if isinstance(value, bytes) else str(value).encode()
