"""The store of one job queue: runs shared.queries.jobs, one method per job state transition.

claim_due (pending -> dispatched), started (dispatched -> running, committed, with a lease kept
alive while handlers run), JobBatch.ack / fail (running -> deleted, done, pending again, or dead;
all fenced), requeue_expired (lost entries and interrupted runs), prune (old done and dead jobs).
"""

from __future__ import annotations

import logging
import os
import random
import socket
import time
import traceback
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Protocol, TypeVar

from duecast.shared.acks import Ack, Row
from duecast.shared.fanout.keys import Entry
from duecast.shared.policy import blame_interruptions, dead_after_failure, retry_delay_s
from duecast.shared.queries.jobs import (
    DEAD,
    DISPATCHED,
    DONE,
    IDLE,
    JOB_COLUMNS,
    RUNNING,
    JobSQL,
    render_jobs,
)
from duecast.shared.queries.source import fence, in_list
from duecast.shared.settings import JobsSettings, MySQLSettings, SourceSettings
from duecast.shared.storage.db import Database
from duecast.shared.storage.leases import Extended, Hold, LeaseKeeper
from duecast.shared.storage.packed import read_packed
from duecast.shared.storage.schema import check_jobs_table
from duecast.shared.storage.source_store import (
    STATUS_COUNT_CAP,
    AckCounts,
    SourceStatus,
    _scalar,
    _us,
)
from duecast.shared.storage.units import (
    Cursor,
    is_transient,
    lock_or_skip,
    retry_transient,
    rollback_to,
    savepoint,
)
from duecast.shared.telemetry import observe

log = logging.getLogger("duecast.jobs")

FINISH_RETRIES = 3
T = TypeVar("T")
ERROR_TEXT_MAX = 16_000  # characters of message + traceback kept per failure


def worker_name() -> str:
    """Who runs a job, as stored in `worker`: host and pid."""
    return f"{socket.gethostname()[:100]}:{os.getpid()}"


def error_text(outcome: object) -> str:
    """A failure as stored in last_error: the exception and its traceback, capped."""
    if isinstance(outcome, BaseException):
        text = "".join(traceback.format_exception(outcome))
    else:
        text = f"invalid result from the task: {outcome!r}"
    return text if len(text) <= ERROR_TEXT_MAX else text[: ERROR_TEXT_MAX - 20] + "\n...(truncated)"


class JobStore:
    """One queue of the jobs table, as a Store the dispatcher, sweeper and worker drive."""

    id_column = "id"
    rows_per_entry = 1

    def __init__(self, db: Database, src: SourceSettings, jobs: JobsSettings, mysql: MySQLSettings) -> None:
        self.db = db
        self.src = src
        self.jobs = jobs
        self.queue = src.name.split(".", 1)[1]
        self.sql: JobSQL = render_jobs(jobs.table)
        self._lease_us = _us(jobs.lease_s)
        self._worker = worker_name()
        self._rng = random.Random()
        self._leases = LeaseKeeper(
            self.extend_leases, jobs.lease_s, mysql, f"jobs of {src.name}", timeout_s=jobs.timeout_s
        )

    def verify(self) -> None:
        with self.db.transaction() as cur:
            check_jobs_table(cur, self.jobs)

    def fence(self, entries: Sequence[Entry] | Iterator[Entry]) -> str:
        return fence(entries, "`id`")

    def claim_due(self, limit: int) -> list[Entry]:
        """Pending -> DISPATCHED for up to `limit` due jobs of this queue, by priority then age."""
        with self.db.transaction() as cur:
            cur.execute(self.sql.claim_due, (self.queue, limit))
            found = cur.fetchall()
            if not found:
                return []
            cur.execute(self.sql.mark_dispatched.format(ids=in_list("`id`", (r[0] for r in found))))
        return [Entry(int(i), int(a) + 1) for i, a in found]

    @contextmanager
    def started(self, entries: Sequence[Entry], columns: Sequence[str] = ()) -> Iterator[JobBatch]:
        """DISPATCHED -> RUNNING for the entries still current, committed before the block runs.

        While the block runs a lease keeper extends their leases, so a long job is not taken for
        an interrupted one. Stale, deleted or elsewhere-held entries are left out (`skipped`).
        """
        if not entries:
            raise ValueError("started() needs at least one entry")
        with self.db.transaction(check=True) as cur:
            fence = self.fence(entries)

            def locking() -> list[Any] | None:
                packed = read_packed(cur, self.sql.lock_dispatched_packed.format(fence=fence), what="jobs")
                if packed is None:  # cut short: the rows are locked now, read them plainly
                    cur.execute(self.sql.lock_dispatched.format(fence=fence))
                return packed

            def skip_locked() -> None:
                cur.execute(self.sql.lock_dispatched_skip.format(fence=fence))

            packed = lock_or_skip(locking, skip_locked)
            if packed is not None:
                rows = [dict(zip(JOB_COLUMNS, values, strict=True)) for values in packed]
            else:
                names = [d[0] for d in cur.description or ()]
                rows = [dict(zip(names, values, strict=True)) for values in cur.fetchall()]
            rows, released = isolate_suspects(rows)
            if released:
                cur.execute(self.sql.release.format(ids=in_list("`id`", (int(r["id"]) for r in released))))
            since = time.monotonic()  # before the leases' NOW(6): the keeper counts from here
            if rows:
                ids = in_list("`id`", (int(r["id"]) for r in rows))
                cur.execute(self.sql.mark_running.format(ids=ids), (self._lease_us, self._worker))
        batch = JobBatch(self, rows, len(entries) - len(rows))
        if not rows:
            yield batch
            return
        with self._leases.holding(batch.entries, since) as batch.hold:
            yield batch

    def extend_leases(self, db: Database, entries: Sequence[Entry]) -> Extended:
        """Push the lease of running jobs forward (on the lease keeper's own connection)."""
        with db.transaction() as cur:
            return renew_leases(
                cur, self.sql, entries, self.fence, extend_args=(self._lease_us,), where_args=()
            )

    def group_key(self, ack: Ack) -> Any:
        if ack.action in ("default", "delete"):
            return ("done",)
        if ack.action in ("retry", "discard", "transaction"):
            return (ack.action, id(ack))
        raise ValueError(f"a job's handler may not return Ack.{ack.action}(); use retry or discard")

    def requeue_expired(self, visibility_timeout_s: float, limit: int) -> int:
        """Lost entries (dispatched, never started) -> pending; interrupted runs -> pending or dead."""
        with self.db.transaction() as cur:
            cur.execute(self.sql.find_expired_dispatched, (_us(visibility_timeout_s), limit))
            ids = [int(r[0]) for r in cur.fetchall()]
            lost = 0
            if ids:
                lost = int(cur.execute(self.sql.requeue_dispatched.format(ids=in_list("`id`", ids))))
        return lost + self.interrupt_expired(limit)

    def requeue_unstarted(self, limit: int) -> int:
        """Every DISPATCHED job (never started) -> pending now: its entry was lost with Redis.
        RUNNING jobs are left to their leases: their workers hold them, entry or not."""
        with self.db.transaction() as cur:
            cur.execute(self.sql.find_expired_dispatched, (0, limit))
            ids = [int(r[0]) for r in cur.fetchall()]
            if not ids:
                return 0
            return int(cur.execute(self.sql.requeue_dispatched.format(ids=in_list("`id`", ids))))

    def release(self, entries: Sequence[Entry]) -> int:
        with self.db.transaction() as cur:
            return int(cur.execute(self.sql.release_unpushed.format(fence=self.fence(entries))))

    def interrupt_expired(self, limit: int) -> int:
        """RUNNING jobs whose lease ran out: their worker died. Each such run is an interruption."""
        with self.db.transaction() as cur:
            cur.execute(self.sql.find_expired_running, (limit,))
            found = [(int(i), int(n), (w, s)) for i, n, w, s in cur.fetchall()]
            if not found:
                return 0
            cap = self.jobs.max_interruptions
            flagged, again, dead = blame_interruptions(found, cap)
            if flagged:
                cur.execute(
                    self.sql.interrupted_flag.format(ids=in_list("`id`", flagged)),
                    ("interrupted with its batch: its worker stopped before finishing it",),
                )
            if again:
                cur.execute(
                    self.sql.interrupted_retry.format(ids=in_list("`id`", again)),
                    ("interrupted: its worker stopped (killed, crashed or stalled) before finishing it",),
                )
            if dead:
                cur.execute(
                    self.sql.interrupted_dead.format(ids=in_list("`id`", dead)),
                    (f"dead: interrupted {cap} times; its worker keeps dying (killed, out of memory...)",),
                )
                log.error(
                    "%d job(s) of queue %s dead after %d interruptions",
                    len(dead),
                    self.queue,
                    cap,
                    extra={"event": "job.dead_interrupted", "source": self.src.name, "job_ids": dead},
                )
        observe.count(self.src.name, "dead", len(dead))
        return len(found)

    def prune(self, limit: int) -> int:
        """Delete done jobs older than retention_s and dead ones older than dead_retention_s."""
        pruned = 0
        queues = ",".join(["%s"] * len(self.jobs.queues))
        for state, keep_s in ((DONE, self.jobs.retention_s), (DEAD, self.jobs.dead_retention_s)):
            if state == DEAD and keep_s == 0:
                continue  # dead jobs kept forever
            with self.db.transaction() as cur:
                cur.execute(
                    self.sql.find_prunable.format(queues=queues),
                    (state, *self.jobs.queues, _us(keep_s), limit),
                )
                ids = [int(r[0]) for r in cur.fetchall()]
                if ids:
                    pruned += int(cur.execute(self.sql.prune.format(ids=in_list("`id`", ids)), (state,)))
        return pruned

    def reset_dispatched(self) -> int:
        with self.db.transaction() as cur:
            return int(cur.execute(self.sql.release_all))

    def status(self) -> SourceStatus:
        with self.db.transaction() as cur:
            counts = {}
            for state in (IDLE, DISPATCHED, RUNNING, DONE, DEAD):
                cur.execute(self.sql.count_state, (state, self.queue, STATUS_COUNT_CAP))
                counts[state] = int(_scalar(cur) or 0)
            cur.execute(self.sql.count_due, (self.queue, STATUS_COUNT_CAP))
            due = int(_scalar(cur) or 0)
            cur.execute(self.sql.oldest_due, (self.queue,) * 10)
            row = cur.fetchone()
        age = None if row is None or row[0] is None else float(row[0]) / 1e6
        detail = {
            "pending": counts[IDLE],
            "due": due,
            "scheduled": max(0, counts[IDLE] - due),
            "dispatched": counts[DISPATCHED],
            "running": counts[RUNNING],
            "done": counts[DONE],
            "dead": counts[DEAD],
        }
        return SourceStatus(due, counts[DISPATCHED] + counts[RUNNING], age, unit="jobs", detail=detail)

    # -- finishing, used by JobBatch ---------------------------------------------------------------

    def finish_ok(self, cur: Cursor, rows: Sequence[Row]) -> int:
        fence = self.fence(_entries(rows))
        stmt = self.sql.finish_done if self.jobs.retention_s > 0 else self.sql.finish_delete
        return int(cur.execute(stmt.format(fence=fence)))

    def finish_failed(self, cur: Cursor, row: Row, outcome: object) -> str:
        """A failed run: "retried" (pending after a backoff delay) or "dead"; "" when it was stale."""
        fence = self.fence(_entries([row]))
        text = error_text(outcome)
        errors = int(row["errors"])
        if dead_after_failure(errors, int(row["max_attempts"])):
            log.error(
                "job %s dead after %d failed attempts",
                row["id"],
                errors + 1,
                extra={"event": "job.dead", "source": self.src.name, "job_id": int(row["id"])},
            )
            return "dead" if cur.execute(self.sql.fail_dead.format(fence=fence), (1, text)) else ""
        delay = retry_delay_s(errors + 1, self.jobs.retry_base_s, self.jobs.retry_cap_s, self._rng)
        return "retried" if cur.execute(self.sql.fail_retry.format(fence=fence), (_us(delay), text)) else ""

    def finish_special(self, cur: Cursor, row: Row, ack: Ack) -> int:
        """A handler's explicit retry (not an error) or discard (dead now)."""
        fence = self.fence(_entries([row]))
        if ack.action == "discard":
            text = f"discarded by its task: {ack.reason}" if ack.reason else "discarded by its task"
            return int(cur.execute(self.sql.fail_dead.format(fence=fence), (0, text)))
        if ack.at is not None:
            return int(cur.execute(self.sql.snooze_at.format(fence=fence), (ack.at,)))
        return int(cur.execute(self.sql.snooze_delay.format(fence=fence), (_us(ack.delay_s),)))


def retrying(unit: Callable[[], T]) -> T:
    """Run a finishing transaction again after a transient error. Every finish is fenced on
    (id, attempt) and RUNNING, so running it again after a COMMIT that did land changes nothing."""
    return retry_transient(unit, what="finishing jobs", redo="the finish", retries=FINISH_RETRIES, log=log)


class LeaseSQL(Protocol):
    """The lease keeper's statements (shared.queries.jobs, shared.queries.topics)."""

    @property
    def lock_leased(self) -> str: ...
    @property
    def extend_lease(self) -> str: ...
    @property
    def leased(self) -> str: ...


def renew_leases(
    cur: Cursor,
    sql: LeaseSQL,
    entries: Sequence[Entry],
    fence: Callable[[Sequence[Entry]], str],
    *,
    extend_args: tuple[Any, ...],
    where_args: tuple[Any, ...],
) -> Extended:
    """Extend the leases still ours that no other session has locked; say which are lost.

    Never waits for a lock (SKIP LOCKED; a plain read): a row locked elsewhere, by this worker's
    own ack most often, is neither kept nor lost this time.
    """
    cur.execute(sql.lock_leased.format(fence=fence(entries)), where_args)
    kept = {int(r[0]) for r in cur.fetchall()}
    if kept:
        mine = [e for e in entries if e.id in kept]
        cur.execute(sql.extend_lease.format(fence=fence(mine)), (*extend_args, *where_args))
    rest = [e for e in entries if e.id not in kept]
    still: set[int] = set()
    if rest:
        cur.execute(sql.leased.format(fence=fence(rest)), where_args)
        still = {int(r[0]) for r in cur.fetchall()}
    return Extended(frozenset(kept), frozenset(e.id for e in rest if e.id not in still))


def isolate_suspects(rows: list[Row]) -> tuple[list[Row], list[Row]]:
    """(rows to run, rows to release). A suspect - a job whose worker died while running it -
    may be what kills workers: a batch takes at most one, and runs it last and alone (see
    JobBatch.phases), so if it kills again no batchmate is interrupted with it."""
    clean = [r for r in rows if int(r["interruptions"]) == 0]
    suspects = [r for r in rows if int(r["interruptions"]) > 0]
    return clean + suspects[:1], suspects[1:]


def _entries(rows: Sequence[Row]) -> Iterator[Entry]:
    return (Entry(int(r["id"]), int(r["dc_attempt"])) for r in rows)


class Finisher(Protocol):
    """What a started batch needs from its store: the fenced finishing statements (JobStore, and a
    topic group's TopicStore, whose messages follow the same rules)."""

    db: Database
    src: SourceSettings

    def finish_ok(self, cur: Cursor, rows: Sequence[Row]) -> int: ...
    def finish_special(self, cur: Cursor, row: Row, ack: Ack) -> int: ...
    def finish_failed(self, cur: Cursor, row: Row, outcome: object) -> object: ...


class JobBatch:
    """Work started (RUNNING, committed) for one worker batch: jobs, or a cluster group's messages
    (`key` = "seq"). `ack` and `fail` each commit, retried as units on transient errors."""

    def __init__(self, store: Finisher, rows: list[Row], skipped: int, key: str = "id") -> None:
        self._store = store
        self._key = key
        self.rows = rows
        self.skipped = skipped
        self.entries = [Entry(int(r[key]), int(r["dc_attempt"])) for r in rows]
        self.hold: Hold | None = None  # the lease keeper's, while the batch runs

    def _finishing(self, rows: Iterable[Row]) -> None:
        """Tell the lease keeper these rows' ack begins: their leaving RUNNING is not a lost lease."""
        if self.hold is not None:
            self.hold.finishing(int(r[self._key]) for r in rows)

    def phases(self) -> list[list[Row]]:
        """Rows in the order to run and ack them: the clean ones, then the suspect (if any) alone,
        after the clean ones' ack has committed."""
        clean = [r for r in self.rows if int(r["interruptions"]) == 0]
        suspect = [r for r in self.rows if int(r["interruptions"]) > 0]
        return [p for p in (clean, suspect) if p]

    def ack(self, acks: Sequence[tuple[Row, Ack]]) -> AckCounts:
        """Finish handled jobs in one transaction: successes as one fenced statement, explicit
        retries and discards one by one, transactional tasks each under a savepoint."""
        if not acks:
            return AckCounts(0, 0)
        self._finishing(row for row, _ in acks)
        (acked, stale), failures = retrying(lambda: self._ack_once(acks))
        self.fail(failures)
        return AckCounts(acked, stale, len(failures))

    def _ack_once(self, acks: Sequence[tuple[Row, Ack]]) -> tuple[tuple[int, int], list[tuple[Row, object]]]:
        store = self._store
        acked = stale = discarded = 0
        failures: list[tuple[Row, object]] = []
        with store.db.transaction() as cur:
            done = [row for row, ack in acks if ack.action in ("default", "delete")]
            if done:
                n = store.finish_ok(cur, done)
                acked += n
                stale += len(done) - n
            for row, ack in acks:
                if ack.action in ("retry", "discard"):
                    n = store.finish_special(cur, row, ack)
                    acked += n
                    stale += 1 - n
                    discarded += n if ack.action == "discard" else 0
                elif ack.action == "transaction":
                    outcome = self._in_transaction(cur, row, ack)
                    if outcome is None:
                        acked += 1
                    elif outcome == "stale":
                        stale += 1
                    else:
                        failures.append((row, outcome))
        observe.count(store.src.name, "dead", discarded)
        return (acked, stale), failures

    def _in_transaction(self, cur: Cursor, row: Row, ack: Ack) -> object | None:
        """Run a transactional task and finish it under one savepoint: its writes stay only if the
        job really is finished by this attempt. Returns None (done), "stale", or the failure."""
        assert ack.work is not None
        try:
            with savepoint(cur, "dc_job"):
                result = ack.work(cur)
                final = Ack.default() if result is None else result
                if not isinstance(final, Ack) or final.action in ("touch", "transaction"):
                    raise TypeError(f"a task must return None, Ack.retry or Ack.discard, not {final!r}")
                if final.action in ("default", "delete"):
                    n = self._store.finish_ok(cur, [row])
                else:
                    n = self._store.finish_special(cur, row, final)
        except Exception as exc:
            if is_transient(exc):
                raise  # the whole transaction is gone: the finish is retried as one unit
            return exc  # the savepoint undid the task's writes
        if n == 0:
            rollback_to(cur, "dc_job")  # another run owns the job now: undo its writes
            return "stale"
        return None

    def fail(self, failures: Sequence[tuple[Row, object]]) -> None:
        """Failed runs: pending again after a backoff delay, or dead once out of attempts."""
        if not failures:
            return
        self._finishing(row for row, _ in failures)

        def once() -> Counter[object]:
            outcomes: Counter[object] = Counter()
            with self._store.db.transaction() as cur:
                for row, outcome in failures:
                    outcomes[self._store.finish_failed(cur, row, outcome)] += 1
            return outcomes

        outcomes = retrying(once)
        for name in ("retried", "dead"):  # counted once committed
            observe.count(self._store.src.name, name, outcomes[name])
