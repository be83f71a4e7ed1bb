"""Reporting: the worker's counts to Redis (`duecast status`) and its log lines about outcomes:
failures (a few per ack with tracebacks, the rest counted), time-outs in one line, and rows another
session held. It changes no row and no entry.
"""

from __future__ import annotations

import logging
from collections import Counter
from typing import Protocol

from ..shared.acks import Row
from ..shared.api.outcomes import InvalidAck, TimedOut
from ..shared.fanout.protocol import Queue
from ..shared.limits import shown as cut
from .flight import Flight, Outcome

log = logging.getLogger("duecast.worker")
STATS_EVERY_S = 0.5  # how often counts go to Redis (duecast status) while busy


class Counting(Protocol):
    """What Stats reads of the Acker: its counts not yet sent (named here, so report.py, which the
    Acker uses for its log lines, does not import the Acker back)."""

    unsent: dict[str, Counter[str]]


class Stats:
    """The acker's counts, added to `counts` (this process's totals) and to Redis per source."""

    def __init__(self, acker: Counting, queue: Queue, now: float) -> None:
        self.acker = acker
        self.queue = queue
        self.counts: Counter[str] = Counter()
        self._sent_at = now

    def send(self, now: float, *, force: bool) -> None:
        """Counts to Redis, at most every STATS_EVERY_S while busy (`force`: now, if any)."""
        if not self.acker.unsent or (not force and now - self._sent_at < STATS_EVERY_S):
            return
        unsent, self.acker.unsent, self._sent_at = self.acker.unsent, {}, now
        for source, counts in unsent.items():
            nonzero = +counts
            self.counts.update(nonzero)
            if nonzero:
                self.queue.add_stats(source, nonzero)


def log_locked(source: str, count: int) -> None:
    # Each costs the start a lock wait (mysql.lock_wait_s) first, so this cannot flood the log.
    log.warning(
        "%d dispatched rows (or ranges) of %s were held by another session's lock past the lock wait "
        "and skipped; the sweeper requeues them after the visibility timeout",
        count,
        source,
        extra={"event": "worker.locked_skipped", "source": source, "count": count},
    )


LOGGED_PER_ACK = 5  # failures logged one by one per ack; the rest are counted in one line


def log_failures(flight: Flight, failed: list[tuple[Row, Outcome]], timed_out: int) -> None:
    """Failed rows are not acked as done: the store retries them (a re-scan row at its next period, a
    job with backoff). Each is logged with its traceback, up to a few per ack; time-outs in one line."""
    source, key = flight.source, flight.store.id_column
    if timed_out:
        limit = min(o.limit_s for _, o in failed if isinstance(o, TimedOut))
        log.warning(
            "%d calls of %s ran past their time limit (%gs) and count as failed",
            timed_out,
            source,
            limit,
            extra={"event": "worker.timed_out", "source": source, "count": timed_out},
        )
    shown = [(row, o) for row, o in failed if not isinstance(o, TimedOut)]
    for row, outcome in shown[:LOGGED_PER_ACK]:
        row_id = row.get(key)
        fields = log_fields(source, row, row_id)
        if isinstance(outcome, InvalidAck):
            log.error(
                "invalid ack for %s id=%s: %s",
                source,
                row_id,
                outcome,
                extra={"event": "worker.invalid_ack", **fields},
            )
        elif isinstance(outcome, BaseException):
            log.error(
                "handler failed for %s id=%s: %r",
                source,
                row_id,
                outcome,
                exc_info=(type(outcome), outcome, outcome.__traceback__),
                extra={"event": "worker.handler_failed", **fields},
            )
        else:
            log.error(
                "invalid ack for %s id=%s: %s",
                source,
                row_id,
                cut(outcome),
                extra={"event": "worker.invalid_ack", **fields},
            )
    if len(shown) > LOGGED_PER_ACK:
        log.error(
            "...and %d more failures of %s in the same ack",
            len(shown) - LOGGED_PER_ACK,
            source,
            extra={
                "event": "worker.handler_failed_more",
                "source": source,
                "count": len(shown) - LOGGED_PER_ACK,
            },
        )


def log_fields(source: str, row: Row, row_id: object) -> dict[str, object]:
    """What a JSON log line names a row by: a job's id and task (job rows have a task), or a row's id."""
    if "task" in row:
        return {"source": source, "job_id": row_id, "task": row["task"]}
    return {"source": source, "row_id": row_id}
