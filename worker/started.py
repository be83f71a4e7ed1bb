"""This process's started records as it keeps them (shared/fanout/started.py holds them in Redis):
each batch of rows that record no worker in MySQL (re-scan rows, range mode's spans) gets a number
and a record when it starts, written with the release of its pop's hold, and is blanked when over.

Per batch, never per row. The hash is rewritten to the batches still in flight once the blanks
outnumber them (deleted when none is), so it stays about as big as what is in flight.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..shared.entries import Entry, encode_entry, encode_hold
from ..shared.fanout.protocol import Queue

SLACK = 16  # blanks tolerated beyond twice the live records before a rewrite


class StartedLog:
    def __init__(self, queue: Queue, process: str) -> None:
        self.queue, self.process = queue, process
        self.live: dict[bytes, bytes] = {}  # batch number -> record, of the batches in flight
        self.unwritten: dict[bytes, bytes] = {}  # ...not in Redis yet: the next release_hold writes them
        self.blanks = 0  # records blanked since the hash was last rewritten
        self._next = 0

    def add(self, source: str, entries: Sequence[Entry], raws: Sequence[bytes] | None = None) -> bytes:
        """Record a started batch (`raws`: its entries as popped, when they are exactly these: a
        join, ten times cheaper than encoding 2,000 entries again); returns its number (for
        `over`). Written by the next `release`."""
        field = b"%d" % self._next
        self._next += 1
        raws = [encode_entry(e.id, e.attempt) for e in entries] if raws is None else raws
        record = encode_hold(source, raws)
        self.live[field] = self.unwritten[field] = record
        return field

    def release(self) -> None:
        """The popped batch is started: its hold goes, its records come, in one MULTI."""
        records, self.unwritten = self.unwritten, {}
        self.queue.release_hold(self.process, records)

    def over(self, fields: Sequence[bytes]) -> None:
        """These batches are over: blanked, or the hash rewritten (or deleted) when that is due."""
        for field in fields:
            self.live.pop(field, None)
            self.unwritten.pop(field, None)
        if not self.live or self.blanks + len(fields) > 2 * len(self.live) + SLACK:
            self.blanks = 0
            self.queue.reset_started(self.process, self.live)
        else:
            self.blanks += len(fields)
            self.queue.end_started(self.process, fields)
