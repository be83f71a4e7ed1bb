"""ReadyQueue, the Queue port's Redis implementation: ready lists (variadic RPUSH, batched pops),
workers' holds, quarantine and counters; and the enqueuers' wake-up.

Redis holds only copies of what MySQL already says; anything here may vanish without losing work,
and a key of the wrong type (WRONGTYPE) is moved aside (retype.py) rather than left to stall a source.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import secrets
import time
from collections.abc import Callable, Mapping, Sequence

import redis

from ..entries import BadHold, Entry, decode_hold, encode_entry
from ..telemetry import observe
from .client import REDIS_ERRORS, RedisClient, translating
from .keys import Keys
from .protocol import NO_SOURCE, Queue
from .retype import Retyper, wrong_type
from .sentinel import master_switches
from .started import StartedRecords

log = logging.getLogger("duecast.queue")

QUARANTINE_CAP = 1000  # newest bad entries kept for inspection
QUARANTINE_ITEM_BYTES = 256  # a 10 MB bad entry is kept as its first bytes only
COUNTER_MAX = 2**53  # a shared counter beyond this was written by hand: not shown
_PUSH_CHUNK = 5000  # keeps one RPUSH far from Redis' argument limits
# A blocking timeout of 0 means "wait forever", and some Redis versions round a sub-millisecond
# one down to it: a wait this short is not worth a round trip anyway.
_MIN_WAIT_S = 0.01
# Redis serves a blocking pop's timeout at its hz (10 times a second by default), so the pop returns
# up to that much late (measured on Redis 7.0: BLPOP of 0.05 s took 0.1 s, of 0.12 s took 0.2 s). A
# wait that must end on time pops for what Redis can time and sleeps the rest: the dispatcher's
# claims on the pace's 0.1 s grid (shared/pace.py) came every 0.2 s, a second holding 4 or 6 of them.
BLOCK_RESOLUTION_S = 0.1


# Pop and hold in one step, with plain commands (no scripting: the ACL grants none, and a script
# runs with every other client waiting): one MULTI copies the first `count` entries of the ready list
# to the worker's hold list (SORT ... BY nosort LIMIT 0 count STORE: O(count), in list order, the
# hold replaced), puts the source name first in it and trims them off the ready list. A worker
# killed the moment the pop returns has its entries in its hold, for redelivery
# (dispatcher/redelivery.py). With a restricted key pattern Redis refuses SORT's BY and GET
# patterns, so +sort reads nothing outside the prefix.


class ReadyQueue(StartedRecords):
    """The Queue port (fanout/protocol.py) over one Redis client: every public method raises duecast's
    QueueError or QueueUnavailable in place of redis-py's errors (client.translate). Holds' release
    and workers' started records are started.py's."""

    def __init__(self, client: RedisClient, keys: Keys) -> None:
        self.client = client
        self.keys = keys
        self._retype = Retyper(client, keys)
        self._turn = 0  # pop_held's next first list: lists are served in turn, not in name order
        self._switches = master_switches(client)  # the Sentinels' master switches data_lost has seen
        self.sleep = time.sleep  # wait_wake's rest past what Redis can time

    @translating
    def ping(self) -> None:
        self.client.ping()

    def close(self) -> None:
        """Close the client's connections (a forking supervisor's, before each fork); never raises:
        a client whose server is gone has nothing left to close."""
        with contextlib.suppress(Exception):
            self.client.close()

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
        transaction, from the lists in turn rather than in the given order (_pop_into_hold).
        `count` may be one per source: a range-mode entry stands for a whole span, a job's for one
        job. With every list empty it waits at most `timeout_s` on their bells, which only wake it:
        the entries stay in Redis until a pop moves them into a hold."""
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
        """One turn: the lists' lengths, then the first non-empty one from this turn's start moved
        into the hold. Each call starts after the list the previous pop took from, so a list full of
        stale or bad entries costs the others one batch per turn, not everything it holds."""
        n = len(sources)
        order = [(self._turn + k) % n for k in range(n)]
        readies = [self.keys.ready(s) for s in sources]
        checks = [(s, k, "list") for s, k in zip(sources, readies, strict=True)]
        lengths = self._retype.call(checks, lambda: self._lengths(readies))
        for i in order:
            if lengths[i] <= 0:
                continue
            # What is left wakes the next idle worker: its wait may have taken the token that rang.
            ring = [bells[j] for j in range(n) if lengths[j] > (counts[i] if j == i else 0)]
            move = functools.partial(self._move_into_hold, worker, sources[i], readies[i], counts[i], ring)
            items = self._retype.call([checks[i]], move)
            if items:
                self._turn = (i + 1) % n
                return sources[i], items
        return None

    def _lengths(self, readies: Sequence[str]) -> list[int]:
        pipe = self.client.pipeline(transaction=False)
        for key in readies:
            pipe.llen(key)
        return [int(n) for n in pipe.execute()]

    def _move_into_hold(
        self, worker: str, source: str, ready: str, count: int, ring: Sequence[str]
    ) -> list[bytes]:
        """MULTI: the hold replaced by [source, the first `count` entries of `ready`], those trimmed
        off `ready`, and the bells of lists left non-empty rung. A ready list of the wrong type fails
        the copy and the trim alike and moves nothing (WRONGTYPE raised for Retyper.call); a bell of
        the wrong type is moved aside."""
        hold = self.keys.inflight(worker)
        pipe = self.client.pipeline(transaction=True)
        pipe.delete(hold)  # a failed copy must not leave the last batch under this one's name
        # As a raw command: redis-py refuses its sort() in a cluster pipeline (both keys share the
        # `{prefix}` slot here, which the server checks).
        pipe.execute_command("SORT", ready, "BY", "nosort", "LIMIT", 0, count, "STORE", hold)  # type: ignore[no-untyped-call]
        pipe.lpush(hold, source.encode())
        pipe.lrange(hold, 1, -1)
        pipe.ltrim(ready, count, -1)
        for bell in ring:
            pipe.lpush(bell, b"1")
            pipe.ltrim(bell, 0, 0)
        results = pipe.execute(raise_on_error=False)
        errors = [r for r in results[1:5] if isinstance(r, Exception)]
        if errors:
            raise errors[0]
        for k, bell in enumerate(ring):
            if isinstance(results[5 + 2 * k], Exception):
                self._retype.move_aside(source, bell, "list")
        items = [_b(r) for r in results[3]]
        if not items:  # emptied by another worker since its length was read: no hold to keep
            self.client.delete(hold)
        return items

    def _wait_bells(self, sources: Sequence[str], bells: list[str], timeout_s: float) -> object:
        checks = [(s, b, "list") for s, b in zip(sources, bells, strict=True)]
        return self._retype.call(checks, lambda: self.client.blpop(bells, timeout=timeout_s))

    @translating
    def held_by(self, worker: str) -> tuple[str, list[bytes]] | None:
        """(source, raw entries) `worker` was holding, or None (also for a hold of the wrong type,
        which is moved aside: the other workers' holds are still read). A hold is a list, the source
        first (pop_held); a string "<source>\n<entry> ..." is an older release's, read the same."""
        key = self.keys.inflight(worker)
        kind = _b(self.client.type(key))
        if kind == b"string":
            value = self.client.get(key)
            return decode_hold(_b(value)) if value else None  # BadHold: the caller quarantines it
        items = self._retype.call([(NO_SOURCE, key, "list")], lambda: self.client.lrange(key, 0, -1))
        if not items:
            return None
        first = _b(items[0])
        if b"\n" in first:
            raise BadHold("bad_source", first)
        source, _ = decode_hold(first + b"\n")  # BadHold when it names no source
        return source, [_b(i) for i in items[1:]]

    @translating
    def data_lost(self) -> bool:
        """True when the epoch canary was missing (and is now set again): every entry this Redis
        held may be gone, so MySQL's DISPATCHED rows must be requeued. Also true on first use, and
        after the Sentinels switched masters: what was pushed to the old one before this client
        left it (within a second, fanout.sentinel) is lost when they demote it, and workers that
        left it first will never pop it."""
        token = secrets.token_hex(8).encode()
        missing = bool(self.client.set(self.keys.epoch(), token, nx=True))
        switches = master_switches(self.client)
        switched, self._switches = switches != self._switches, switches
        return missing or switched

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
        """Block until an enqueuer's wake-up or `timeout_s`, ending on time (BLOCK_RESOLUTION_S): True
        when woken. A wake-up that comes while the rest is slept waits for the next call."""
        deadline = time.monotonic() + timeout_s
        wake = self.keys.wake()
        blocking_s = timeout_s - BLOCK_RESOLUTION_S
        pop: Callable[[], object]
        if blocking_s >= _MIN_WAIT_S:
            pop = functools.partial(self.client.blpop, [wake], timeout=blocking_s)
        else:  # too short for Redis to time: a wake-up already there still ends it at once
            pop = functools.partial(self.client.lpop, wake)
        if self._retype.call([(NO_SOURCE, wake, "list")], pop) is not None:
            return True
        self.sleep(max(0.0, deadline - time.monotonic()))
        return False

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
        """HINCRBYs of one key: a hash of the wrong type fails every one, so a retry never doubles one.

        A counter that cannot take the increment (pushed to 2**63 - 1, or not a number: the ACL lets
        any duecast client write the hash) is reset to this increment with one WARNING: counters are
        only telemetry, and a role's tick must not fail over one."""
        pipe = self.client.pipeline(transaction=False)
        for field, n in fields.items():
            pipe.hincrby(key, field, n)
        results = pipe.execute(raise_on_error=False)
        errors = [(f, r) for f, r in zip(fields, results, strict=True) if isinstance(r, Exception)]
        if not errors:
            return
        if not all(_absurd_counter(e) for _, e in errors):
            raise next(e for _, e in errors if not _absurd_counter(e))
        repair = self.client.pipeline(transaction=False)
        for field, _ in errors:
            repair.hset(key, field, fields[field])
        repair.execute()
        log.warning(
            "Redis counter%s %s in %s could not be added to (%s): reset to this increment",
            "s" if len(errors) > 1 else "",
            ", ".join(f for f, _ in errors),
            key,
            str(errors[0][1])[:80],
            extra={"event": "queue.counter_reset", "key": key},
        )

    @translating
    def stats(self, source: str) -> dict[str, int]:
        """The shared counters; a value that is not a sane count (not an integer, negative, beyond
        COUNTER_MAX: written by hand) is left out rather than shown or failing the reader."""
        key = self.keys.stats(source)
        raw = self._retype.call([(source, key, "hash")], lambda: self.client.hgetall(key))
        counts: dict[str, int] = {}
        for k, v in raw.items():
            n = _count(v)
            if n is not None:
                counts[_b(k).decode(errors="replace")] = n
        return counts


def _absurd_counter(exc: Exception) -> bool:
    """HINCRBY's refusals of the value already there (overflow, not an integer)."""
    said = str(exc).rsplit("of pipeline caused error: ", 1)[-1]
    return isinstance(exc, redis.ResponseError) and ("would overflow" in said or "not an integer" in said)


def _count(value: object) -> int | None:
    text = _b(value)
    if len(text) > 20 or not text.isdigit():
        return None
    n = int(text)
    return n if n <= COUNTER_MAX else None


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
