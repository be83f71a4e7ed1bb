"""This process's started records as it keeps them (shared/fanout/started.py holds them in Redis):
each batch of rows that record no worker in MySQL (re-scan rows, range mode's spans) gets a number
and a record when it starts, and a blank when it is over, all written by the MULTI that releases
the next pop's hold: no round trip of their own, per batch, never per row.

So the hash may still name batches that ended since the last pop (an idle worker's last ones):
harmless, as the supervisor puts back only rows still RUNNING under the recorded attempt. It is
rewritten to the live batches once the blanks outnumber them, so it stays about as big as what is
in flight.
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
        self.unwritten: dict[bytes, bytes] = {}  # records and blanks the next release writes
        self.blanks = 0  # batches blanked (or to be) since the hash was last rewritten
        self._next = 0

    def add(self, source: str, entries: Sequence[Entry], raws: Sequence[bytes] | None = None) -> bytes:
        """Record a started batch (`raws`: its entries as popped, when they are exactly these: a
        join, ten times cheaper than encoding 2,000 entries again); returns its number (for
        `over`). Written by the next `release`."""
        field = b"%d" % self._next
        self._next += 1
        raws = [encode_entry(e.id, e.attempt) for e in entries] if raws is None else raws
        self.live[field] = self.unwritten[field] = encode_hold(source, raws)
        return field

    def over(self, fields: Sequence[bytes]) -> None:
        """These batches are over: blanked by the next `release`."""
        for field in fields:
            self.live.pop(field, None)
            self.unwritten[field] = b""
        self.blanks += len(fields)

    def release(self) -> None:
        """The popped batch is started: its hold goes, the records and blanks since the last
        release come, in one MULTI; the hash rewritten to the live records when that is due."""
        replace = self.blanks > 2 * len(self.live) + SLACK
        self.queue.release_hold(self.process, self.live if replace else self.unwritten, replace=replace)
        self.unwritten = {}  # written (a failed release keeps them for the next)
        if replace:
            self.blanks = 0
