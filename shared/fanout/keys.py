"""Every Redis key duecast uses, the codec of a ready-list entry ("<id>:<attempt>") and the parser of
a worker's hold record ("<source>\n<entry> <entry> ...").

Keys carry a `{prefix}` hash tag so a source's keys stay in one Redis Cluster slot.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

MAX_ID = 2**63 - 1  # BIGINT
MAX_ATTEMPT = 2**32 - 1  # INT UNSIGNED
MAX_ENTRY_BYTES = 30  # 19 digits + ":" + 10 digits
# ASCII digits only: a bytes pattern never matches Unicode digits such as "١٢".
_ENTRY = re.compile(rb"([1-9][0-9]{0,18}):([1-9][0-9]{0,9})")
# A hold's first line: a source name, as the settings allow them (re-scan, "jobs.<queue>",
# "topics.<topic>-<group>"), in ASCII; anything else is not a record duecast wrote.
_HOLD_SOURCE = re.compile(rb"[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}")


@dataclass(frozen=True, slots=True)
class Entry:
    id: int
    attempt: int


class BadEntry(ValueError):
    """A ready-list item that is not a valid entry; `reason` is a stable, short label."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def encode_entry(id_: int, attempt: int) -> bytes:
    return b"%d:%d" % (id_, attempt)


def decode_entry(raw: bytes) -> Entry:
    """Parse one entry or raise BadEntry. Never trusts the list: size is checked before parsing."""
    if len(raw) > MAX_ENTRY_BYTES:
        raise BadEntry("too_long")
    m = _ENTRY.fullmatch(raw)
    if m is None:
        raise BadEntry("malformed")
    id_, attempt = int(m.group(1)), int(m.group(2))
    if id_ > MAX_ID:
        raise BadEntry("id_out_of_range")
    if attempt > MAX_ATTEMPT:
        raise BadEntry("attempt_out_of_range")
    return Entry(id_, attempt)


class BadHold(ValueError):
    """A worker's hold record that does not parse (its source line); `reason` is a stable, short label,
    `raw` the record as read."""

    def __init__(self, reason: str, raw: bytes) -> None:
        super().__init__(reason)
        self.reason = reason
        self.raw = raw


def decode_hold(value: bytes) -> tuple[str, list[bytes]]:
    """(source, raw entries) of a hold record, or BadHold. Only the source line is checked here: each
    entry is checked by decode_entry, so one bad entry does not cost the others."""
    source, newline, entries = value.partition(b"\n")
    if not newline:
        raise BadHold("no_source_line", value)
    if _HOLD_SOURCE.fullmatch(source) is None:
        raise BadHold("bad_source", value)
    return source.decode("ascii"), entries.split()


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
        """The batch a worker popped and has not finished: "<source>\n<entry> <entry> ...", written
        by the same Lua script as the pop. Lets the leader requeue a dead worker's rows at once;
        lost with Redis, like any entry."""
        return f"{{{self.prefix}}}:inflight:{worker}"

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
