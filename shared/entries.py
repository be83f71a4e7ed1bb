"""The unit of work Redis carries: an Entry (row or run id + attempt), its text codec ("<id>:<attempt>"),
and the parser of a worker's hold record ("<source>\n<entry> <entry> ..."). Pure values: no I/O, no
Redis; the queue stores these bytes (shared/fanout), the stores fence on the pair (shared/storage).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from .errors import DuecastError

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


class BadEntry(DuecastError, ValueError):
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


class BadHold(DuecastError, ValueError):
    """A worker's hold record that does not parse (its source line); `reason` is a stable, short label,
    `raw` the record as read."""

    def __init__(self, reason: str, raw: bytes) -> None:
        super().__init__(reason)
        self.reason = reason
        self.raw = raw


def encode_hold(source: str, raws: Sequence[bytes]) -> bytes:
    """A hold record "<source>\n<entry> <entry> ..." (what decode_hold reads): one value per batch,
    so a batch's record is written and removed whole."""
    return source.encode("ascii") + b"\n" + b" ".join(raws)


def decode_hold(value: bytes) -> tuple[str, list[bytes]]:
    """(source, raw entries) of a hold record, or BadHold. Only the source line is checked here: each
    entry is checked by decode_entry, so one bad entry does not cost the others."""
    source, newline, entries = value.partition(b"\n")
    if not newline:
        raise BadHold("no_source_line", value)
    if _HOLD_SOURCE.fullmatch(source) is None:
        raise BadHold("bad_source", value)
    return source.decode("ascii"), entries.split()
