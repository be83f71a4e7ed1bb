"""Worker: per tick, pop a batch, validate entries, lock rows, run the handler, ack fenced, commit.

A bad entry is quarantined, a stale one skipped, a failed row left DISPATCHED for the sweeper;
a batch MySQL kept failing past worker.unit_retry_s is pushed back onto its ready list.
"""

from __future__ import annotations

import logging
import random
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from duecast.shared.acks import Ack, Row
from duecast.shared.api.handlers import Handler
from duecast.shared.fanout.keys import BadEntry, Entry, decode_entry
from duecast.shared.fanout.queue import ReadyQueue
from duecast.shared.process.loop import Tick
from duecast.shared.settings import WorkerSettings
from duecast.shared.storage.source_store import SkipsLocked, StaleAck, Store, WorkBatch
from duecast.shared.storage.units import is_transient, retry_transient
from duecast.shared.telemetry import observe
from duecast.worker.executor import Executor

log = logging.getLogger("duecast.worker")
UNIT_RETRIES = 1_000  # only a backstop: worker.unit_retry_s is what limits a batch's retries


def decode_batch(raws: Sequence[bytes]) -> tuple[list[Entry], list[tuple[bytes, str]], int]:
    """Valid unique entries, bad ones with their reason, and how many exact duplicates were dropped."""
    seen: set[Entry] = set()
    entries: list[Entry] = []
    bad: list[tuple[bytes, str]] = []
    for raw in raws:
        try:
            entry = decode_entry(raw)
        except BadEntry as exc:
            bad.append((raw, exc.reason))
            continue
        if entry not in seen:
            seen.add(entry)
            entries.append(entry)
    return entries, bad, len(raws) - len(bad) - len(entries)


class Worker:
    name = "worker"

    def __init__(
        self,
        stores: Mapping[str, Store],
        handlers: Mapping[str, Handler],
        queue: ReadyQueue,
        settings: WorkerSettings,
        executor: Executor,
        *,
        process: str | None = None,
    ) -> None:
        self.stores = stores
        self.handlers = handlers
        self.queue = queue
        self.settings = settings
        self.executor = executor
        self.process = process  # its name in the worker registry; None: no hold recorded
        self._rng = random.Random()
        self.counts: Counter[str] = Counter()
        # pop_batch counts rows; a range-mode entry stands for range_size of them. A registered
        # worker pops each list by its own count; the plain BLMPOP takes one count for all, the
        # smallest, so a batch never holds more rows than pop_batch.
        self.pop_counts = [max(1, -(-settings.pop_batch // s.rows_per_entry)) for s in stores.values()]
        self.pop_count = min(self.pop_counts, default=settings.pop_batch)

    def tick(self) -> Tick:
        sources, timeout_s = list(self.stores), self.settings.block_timeout_s
        if self.process is None:
            popped = self.queue.pop(sources, self.pop_count, timeout_s)
        else:  # held from the pop on: what redelivery requeues at once if this process dies
            popped = self.queue.pop_held(self.process, sources, self.pop_counts, timeout_s)
        if popped is None:
            return Tick(0.0, idle=True)  # the pop already waited block_timeout_s
        source, raws = popped
        started = time.perf_counter()
        try:
            counts = self._handle(source, raws)
        except Exception as exc:
            if is_transient(exc):  # MySQL outlasted worker.unit_retry_s; anything else waits for the sweeper
                self._hand_back(source, raws)
            raise  # the loop logs `tick failed` and backs off
        if self.process is not None:
            self.queue.release_hold(self.process)
        self.counts.update(counts)
        observe.batch_done("worker", source, started)
        self.queue.add_stats(source, counts)
        return Tick(0.0, idle=False)

    def _hand_back(self, source: str, raws: list[bytes]) -> None:
        """Put a batch this worker gave up on (MySQL still failing after worker.unit_retry_s) back
        on its ready list at once. Through Redis, not MySQL: MySQL is what
        just failed, and the rows are still DISPATCHED under the attempt their entries carry, so
        whoever pops them next locks them under that fence, and an entry the sweeper has since
        requeued (a new attempt) is skipped as stale. Left alone, a live worker's rows would wait
        for the visibility timeout: redelivery takes only dead workers' holds."""
        raws = [raw for raw in raws if _decodes(raw)]  # the bad ones are quarantined already
        try:
            self.queue.push_raw(source, raws)
            if self.process is not None:
                self.queue.release_hold(self.process)
        except Exception as exc:  # Redis too: the hold stays, redelivery or the sweeper decides
            log.error(
                "could not hand back a batch of %d entries of %s: %r",
                len(raws),
                source,
                exc,
                extra={"event": "worker.hand_back_failed", "source": source, "count": len(raws)},
            )
            return
        log.warning(
            "gave up on a batch of %d entries of %s; pushed them back for another try",
            len(raws),
            source,
            extra={"event": "worker.batch_handed_back", "source": source, "count": len(raws)},
        )

    def _handle(self, source: str, raws: list[bytes]) -> Counter[str]:
        entries, bad, dupes = decode_batch(raws)
        counts: Counter[str] = Counter(popped=len(raws), bad=len(bad), stale_entries=dupes)
        if bad:
            log.warning(
                "quarantined %d bad entries from %s (%s)",
                len(bad),
                source,
                ", ".join(sorted({r for _, r in bad})),
                extra={"event": "worker.bad_entries", "source": source, "count": len(bad)},
            )
            self.queue.quarantine(source, bad)
        if entries:
            try:
                counts.update(self._work(self.stores[source], self.handlers[source], entries))
            except StaleAck as exc:  # rolled back whole; every row is redelivered
                log.warning(
                    "batch of %s rolled back: %s",
                    source,
                    exc,
                    extra={"event": "worker.batch_rolled_back", "source": source},
                )
                counts["stale_acks"] += exc.count
        return counts

    def _work(self, store: Store, handler: Handler, entries: list[Entry]) -> Counter[str]:
        """Start, run and ack the entries, group by group: a start runs one group and leaves the
        others (suspects, shared.policy.start_groups) to start once it is acked."""
        counts: Counter[str] = Counter()
        todo = [entries]
        while todo:
            done, later = self._work_group(store, handler, todo.pop(0))
            counts.update(done)
            todo += later
        return counts

    def _work_group(
        self, store: Store, handler: Handler, entries: list[Entry]
    ) -> tuple[Counter[str], list[list[Entry]]]:
        """Start, run, ack one group. A deadlock, lock wait timeout or lost connection retries the
        unit: the rows are locked again under their fence, so a commit that did land (outcome
        unknown) shows as rows no longer matching, and rows already handled are acked with the
        outcome they had, never run twice."""
        known: dict[Any, Ack | BaseException] = {}

        def unit() -> tuple[Counter[str], list[list[Entry]]]:
            counts: Counter[str] = Counter()
            with store.started(entries, handler.columns) as batch:
                # Entries whose row is not locked here are stale, deleted, or held elsewhere.
                locked = batch.skipped_locked if isinstance(batch, SkipsLocked) else 0
                counts["stale_entries"] += batch.skipped - locked
                counts["locked_skipped"] += locked
                if locked:
                    _log_locked(store.src.name, locked)
                counts["started"] += len(batch.rows)
                for rows in batch.phases():
                    counts.update(self._run_phase(store, handler, batch, rows, known))
            return counts, batch.later

        return retry_transient(
            unit,
            what=f"batch of {store.src.name}",
            redo="the unit",
            retries=UNIT_RETRIES,
            log=log,
            rng=self._rng,
            cap_s=self.settings.error_backoff_s,
            event="worker.unit_retried",
            budget_s=self.settings.unit_retry_s,
        )

    def _run_phase(
        self,
        store: Store,
        handler: Handler,
        batch: WorkBatch,
        rows: list[Row],
        known: dict[Any, Ack | BaseException],
    ) -> Counter[str]:
        key = store.id_column
        if known:  # a retried unit: rows handled before keep their outcome, never run twice
            fresh = [row for row in rows if row.get(key) not in known]
            if fresh:
                redone = self.executor.run(handler, fresh)
                known.update(zip([row.get(key) for row in fresh], redone, strict=True))
            outcomes = [known[row.get(key)] for row in rows]
        else:
            outcomes = self.executor.run(handler, rows) if rows else []
            known.update(zip([row.get(key) for row in rows], outcomes, strict=True))
        acks: list[tuple[Row, Ack]] = []
        failed: list[tuple[Row, object]] = []
        valid: dict[int, bool] = {}  # by identity: handlers mostly return one shared Ack object
        for row, outcome in zip(rows, outcomes, strict=True):
            if isinstance(outcome, Ack):
                ok = valid.get(id(outcome))
                if ok is None:
                    ok = valid[id(outcome)] = self._valid(store, outcome)
                if ok:
                    acks.append((row, outcome))
                    continue
            failed.append((row, outcome))
            self._log_failure(store, row, outcome)
        result = batch.ack(acks)
        batch.fail(failed)
        return Counter(acked=result.acked, stale_acks=result.stale, failed=len(failed) + result.refused)

    @staticmethod
    def _valid(store: Store, ack: Ack) -> bool:
        try:
            store.group_key(ack)
        except ValueError:
            return False
        return True

    @staticmethod
    def _log_failure(store: Store, row: Row, outcome: object) -> None:
        # Not acked: the row stays DISPATCHED and the sweeper requeues it after the visibility
        # timeout, which is also this failure's retry delay.
        row_id = row.get(store.id_column)
        fields = _log_fields(store.src.name, row, row_id)
        if isinstance(outcome, BaseException):
            log.error(
                "handler failed for %s id=%s: %r",
                store.src.name,
                row_id,
                outcome,
                exc_info=(type(outcome), outcome, outcome.__traceback__),
                extra={"event": "worker.handler_failed", **fields},
            )
        else:
            log.error(
                "invalid ack for %s id=%s: %r",
                store.src.name,
                row_id,
                outcome,
                extra={"event": "worker.invalid_ack", **fields},
            )


def _decodes(raw: bytes) -> bool:
    try:
        decode_entry(raw)
    except BadEntry:
        return False
    return True


def _log_locked(source: str, count: int) -> None:
    # Each costs the batch a lock wait (mysql.lock_wait_s) first, so this cannot flood the log.
    log.warning(
        "%d dispatched rows (or ranges) of %s were held by another session's lock past the lock wait "
        "and skipped; the sweeper requeues them after the visibility timeout",
        count,
        source,
        extra={"event": "worker.locked_skipped", "source": source, "count": count},
    )


def _log_fields(source: str, row: Row, row_id: object) -> dict[str, object]:
    """What a JSON log line names a row by: a job's id and task (job rows have a task), or a row's id."""
    if "task" in row:
        return {"source": source, "job_id": row_id, "task": row["task"]}
    return {"source": source, "row_id": row_id}
