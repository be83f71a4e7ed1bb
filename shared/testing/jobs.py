"""`duecast.testing.Jobs`: the Enqueuer's stand-in for a user's own tests. Jobs are checked as the
Enqueuer checks them and kept in memory; `drain()` (or, inline, `enqueue` itself) runs them as a worker
would, on a clock of its own that honours delays and backoff. No MySQL, no Redis.
"""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from ..api.context import cancel_held
from ..api.enqueue import DuplicateJob, Job, JobId, JobRow, OnDuplicate, encode
from ..api.handlers import Registry
from ..api.middleware import Middleware, through_enqueue
from ..settings import JobsSettings
from ..storage.leased.run_units import kept_result
from .calls import TestingError
from .job_run import Finish, JobRun

PENDING, DONE, DEAD, CANCELLED = "pending", "done", "dead", "cancelled"
MAX_RUNS = 10_000  # a drain that runs more than this is a task retrying itself for ever


class JobDead(TestingError):
    """Inline mode: the job enqueued ended dead (its last error is this exception's cause)."""

    def __init__(self, job: JobRecord) -> None:
        last = (job.last_error or "").strip().splitlines()
        super().__init__(f"job {job.id} ({job.task}) is dead: {last[-1] if last else 'no error kept'}")
        self.job = job


@dataclass
class JobRecord:
    """One job as the harness keeps it: what `duecast jobs show` would say of it."""

    id: int
    task: str
    payload: Any  # the decoded JSON, as the task gets it
    queue: str
    priority: int
    max_attempts: int
    unique_key: str | None
    run_at: datetime  # naive UTC, on the harness's clock
    created_at: datetime
    state: str = PENDING  # pending | done | dead | cancelled
    attempt: int = 0  # runs so far
    errors: int = 0  # failed runs
    last_error: str | None = None
    result: Any = None  # what the task returned (decoded JSON), once done
    finished_at: datetime | None = None
    payload_text: str = field(default="", repr=False)
    meta_text: str | None = field(default=None, repr=False)

    def row(self) -> dict[str, Any]:
        """The row a worker reads to run it (shared/queries/jobs.py JOB_COLUMNS)."""
        return {
            "id": self.id,
            "dc_attempt": self.attempt + 1,
            "task": self.task,
            "payload": self.payload_text,
            "errors": self.errors,
            "max_attempts": self.max_attempts,
            "interruptions": 0,
            "queue": self.queue,
            "created_at": self.created_at,
            "meta": self.meta_text,
        }


@dataclass(frozen=True)
class Drained:
    """What one `drain()` ran: runs, and how they ended."""

    runs: int = 0
    done: int = 0
    retried: int = 0  # failed and pending again, or Ack.retry
    dead: int = 0
    cancelled: int = 0  # runs whose job was cancelled meanwhile: their finish did nothing


class Jobs:
    """An in-memory Enqueuer for tests: `enqueue`, `enqueue_many`, `aenqueue`, `aenqueue_many` and
    `wake` as the Enqueuer's, with its checks (settings `jobs`, the `tasks` it accepts). `inline=True`
    runs each job at once, retries included, and raises JobDead if it ends dead; otherwise jobs wait
    for `drain()`. `cursor`: what a transactional task gets as its cursor (none by default)."""

    def __init__(
        self,
        registry: Registry | None = None,
        *,
        inline: bool = False,
        jobs: JobsSettings | None = None,
        tasks: Iterable[str] | None = None,
        cursor: Any = None,
        seed: int | None = None,
    ) -> None:
        self.registry = registry
        self.inline = inline
        self.settings = jobs if jobs is not None else JobsSettings()
        self.tasks = frozenset(tasks) if tasks is not None else None
        self.now = datetime.now(UTC).replace(tzinfo=None, microsecond=0)
        self._run = JobRun(registry, self.settings, cursor, random.Random(seed))
        self.middleware: list[Middleware] = []
        self._jobs: dict[int, JobRecord] = {}
        self._next_id = 1
        self._running: set[int] = set()  # the job whose task runs now (a task may cancel it)

    # -- the Enqueuer's surface ----------------------------------------------------------------------

    def enqueue(
        self,
        task: str,
        payload: Any = None,
        *,
        on_duplicate: OnDuplicate = "error",
        conn: Any = None,
        **options: Any,
    ) -> JobId:
        """As Enqueuer.enqueue (options: queue, delay_s, run_at, priority, max_attempts, unique_key).
        `conn` is accepted and ignored: here every enqueue "commits" at once."""
        return self.enqueue_many([Job(task, payload, **options)], on_duplicate=on_duplicate)[0]

    def enqueue_many(
        self, jobs: Iterable[Job], *, on_duplicate: OnDuplicate = "error", conn: Any = None
    ) -> list[JobId]:
        """As Enqueuer.enqueue_many: every job checked first, then all enqueued or none."""
        if on_duplicate not in ("error", "keep"):
            raise TestingError(f"on_duplicate must be 'error' or 'keep', not {on_duplicate!r}")
        rows = [encode(through_enqueue(self.middleware, job), self.settings, self.tasks) for job in jobs]
        holders = self._holders(rows, on_duplicate)
        ids = [
            JobId(h, merged=True) if h else JobId(self._add(r).id) for r, h in zip(rows, holders, strict=True)
        ]
        if self.inline:
            for job_id in ids:
                if not job_id.merged:
                    self._run_inline(self._jobs[job_id])
        return ids

    async def aenqueue(self, task: str, payload: Any = None, **options: Any) -> JobId:
        return self.enqueue(task, payload, **options)

    async def aenqueue_many(self, jobs: Iterable[Job], **options: Any) -> list[JobId]:
        return self.enqueue_many(jobs, **options)

    def use(self, middleware: Middleware) -> Middleware:
        """As Enqueuer.use: enqueue middleware on every job (the Registry's run middleware applies
        to runs here as on a worker)."""
        self.middleware.append(middleware)
        return middleware

    def cancel(self, ids: int | Iterable[int]) -> int:
        """As Enqueuer.cancel: pending jobs (due or scheduled) become "cancelled", final; returns how
        many. A job whose task runs now (cancelled by that task, or by another it runs beside) is
        flagged for `current_job().cancelled`, its `async def` task cancelled, and its finish does
        nothing: no retry, no done."""
        wanted = [ids] if isinstance(ids, int) else list(ids)
        found = [self._jobs[int(i)] for i in wanted if int(i) in self._jobs]
        cancelled = [j for j in found if j.state == PENDING]
        for job in cancelled:
            job.state, job.finished_at = CANCELLED, self.now
        cancel_held([j.id for j in cancelled if j.id in self._running])
        return len(cancelled)

    async def acancel(self, ids: int | Iterable[int]) -> int:
        return self.cancel(ids)

    def wake(self) -> None:
        """Nothing to wake: kept so that code calling Enqueuer.wake() runs under test."""

    def close(self) -> None:
        """Nothing to close."""

    # -- what a test asks --------------------------------------------------------------------------

    def get(self, job_id: int) -> JobRecord:
        try:
            return self._jobs[int(job_id)]
        except KeyError:
            raise TestingError(f"no job {job_id} was enqueued here") from None

    def all(
        self, task: str | None = None, *, queue: str | None = None, state: str | None = None
    ) -> list[JobRecord]:
        """Jobs in enqueue order, filtered by task, queue and state ("pending", "done", "dead",
        "cancelled")."""
        return [j for j in self._jobs.values() if _matches(j, task, queue, state)]

    def assert_enqueued(
        self,
        task: str,
        *,
        payload: Any = ...,
        queue: str | None = None,
        priority: int | None = None,
        count: int | None = None,
    ) -> list[JobRecord]:
        """The pending jobs of `task` that match (payload compared whole; unittest.mock.ANY matches
        anything, inside a dict too). Raises AssertionError listing what is pending when none does, or
        when `count` is given and another number does."""
        pending = self.all(state=PENDING)
        found = [
            j
            for j in pending
            if j.task == task
            and (payload is ... or j.payload == payload)
            and (queue is None or j.queue == queue)
            and (priority is None or j.priority == priority)
        ]
        if (count is None and not found) or (count is not None and len(found) != count):
            wanted = f"{count if count is not None else 'a'} pending job(s) of task {task!r}"
            shown = (
                "\n".join(f"  {j.task} {j.queue} p{j.priority} {j.payload!r}" for j in pending) or "  none"
            )
            raise AssertionError(f"expected {wanted} matching, found {len(found)}; pending:\n{shown}")
        return found

    def assert_not_enqueued(self, task: str, **match: Any) -> None:
        """No pending job of `task` matches (same filters as assert_enqueued)."""
        try:
            self.assert_enqueued(task, count=0, **match)
        except AssertionError:
            raise AssertionError(f"a pending job of task {task!r} matches {match or ''}".rstrip()) from None

    def clear(self) -> None:
        """Forget every job (the clock stays)."""
        self._jobs.clear()

    # -- running -------------------------------------------------------------------------------------

    def advance(self, seconds: float) -> None:
        """Move the harness's clock on: jobs delayed until then become due."""
        if not seconds >= 0:
            raise TestingError(f"advance() takes seconds >= 0, not {seconds!r}")
        self.now += timedelta(seconds=seconds)

    def drain(
        self, queue: str | None = None, *, with_scheduled: bool = True, max_runs: int = MAX_RUNS
    ) -> Drained:
        """Run every due job of `queue` (all queues by default), highest priority first, jobs they
        enqueue included; with_scheduled: move the clock to each later job's run_at (delays, backoff)
        until nothing is pending. A job retrying without end stops it after `max_runs` runs."""
        tally: dict[str, int] = {"runs": 0, "done": 0, "retried": 0, "dead": 0, "cancelled": 0}
        for job in self._due_order(queue, with_scheduled, max_runs):
            tally[self._finish(job, self._running_one(job)).state_word] += 1
            tally["runs"] += 1
        return Drained(**tally)

    async def adrain(
        self, queue: str | None = None, *, with_scheduled: bool = True, max_runs: int = MAX_RUNS
    ) -> Drained:
        """drain() on the running event loop: async tasks run on it, plain ones on threads."""
        tally: dict[str, int] = {"runs": 0, "done": 0, "retried": 0, "dead": 0, "cancelled": 0}
        for job in self._due_order(queue, with_scheduled, max_runs):
            self._running.add(job.id)
            try:
                finish = await self._run.arun(job.row())
            finally:
                self._running.discard(job.id)
            tally[self._finish(job, finish).state_word] += 1
            tally["runs"] += 1
            await asyncio.sleep(0)
        return Drained(**tally)

    # -- inside ----------------------------------------------------------------------------------------

    def _add(self, row: JobRow) -> JobRecord:
        run_at = (
            row.run_at_utc if row.run_at_utc is not None else self.now + timedelta(microseconds=row.delay_us)
        )
        job = JobRecord(
            self._next_id,
            row.task,
            json.loads(row.payload),
            row.queue,
            row.priority,
            row.max_attempts,
            row.unique_key,
            run_at,
            self.now,
            payload_text=row.payload,
            meta_text=row.meta,
        )
        self._jobs[job.id] = job
        self._next_id += 1
        return job

    def _holders(self, rows: list[JobRow], on_duplicate: OnDuplicate) -> list[int]:
        """Per row: the active job already holding its unique key (0: none). A key twice in the
        batch, or held with on_duplicate="error": DuplicateJob, nothing written."""
        held = {
            (j.task, j.unique_key): j.id
            for j in self._jobs.values()
            if j.state == PENDING and j.unique_key is not None
        }
        seen: set[tuple[str, str]] = set()
        out = []
        for r in rows:
            key = (r.task, r.unique_key or "")
            if r.unique_key is not None and on_duplicate == "error":
                if key in seen:
                    raise DuplicateJob(
                        f"unique key {r.unique_key!r} of task {r.task!r} appears twice in one enqueue_many"
                    )
                if key in held:
                    raise DuplicateJob(
                        "a pending or running job of the same task already holds this unique key "
                        f"{r.unique_key!r}"
                    )
            seen.add(key)
            out.append(held.get(key, 0) if r.unique_key is not None else 0)
        return out

    def _due_order(self, queue: str | None, with_scheduled: bool, max_runs: int) -> Iterator[JobRecord]:
        for _ in range(max_runs):
            pending = [
                j for j in self._jobs.values() if j.state == PENDING and (queue is None or j.queue == queue)
            ]
            if not pending:
                return
            due = [j for j in pending if j.run_at <= self.now]
            if not due:
                if not with_scheduled:
                    return
                self.now = min(j.run_at for j in pending)
                continue
            yield min(due, key=lambda j: (j.priority, j.run_at, j.id))
        raise TestingError(
            f"drain() ran {max_runs} jobs and some are still pending: a task retrying for ever?"
        )

    def _running_one(self, job: JobRecord) -> Finish:
        self._running.add(job.id)
        try:
            return self._run.run(job.row())
        finally:
            self._running.discard(job.id)

    def _finish(self, job: JobRecord, finish: Finish) -> Finish:
        """The job's next state, as the worker's finish writes it (storage/leased/store.py)."""
        if job.state == CANCELLED:  # cancelled while it ran: its finish is stale, as on MySQL
            return Finish(CANCELLED)
        job.attempt += 1
        if finish.state_word == "done":
            job.state, job.finished_at = DONE, self.now
            if finish.result is not None:
                kept, job.last_error = kept_result(finish.result, self.settings.max_result_bytes)
                job.result = None if kept is None else json.loads(kept)
        elif finish.state_word == "dead":
            job.state, job.finished_at = DEAD, self.now
            job.errors += finish.errors
            job.last_error = finish.text
        else:
            job.errors += finish.errors
            if finish.text is not None:
                job.last_error = finish.text
            job.run_at = finish.at if finish.at is not None else self.now + timedelta(seconds=finish.delay_s)
        return finish

    def _run_inline(self, job: JobRecord) -> None:
        """Inline: this job's runs back to back (its delays and backoff skipped), until it is over."""
        for _ in range(MAX_RUNS):
            finish = self._finish(job, self._running_one(job))
            if job.state in (DONE, CANCELLED):
                return
            if job.state == DEAD:
                raise JobDead(job) from finish.error
        raise TestingError(f"job {job.id} ({job.task}) still pending after {MAX_RUNS} inline runs")


def _matches(job: JobRecord, task: str | None, queue: str | None, state: str | None) -> bool:
    return (
        (task is None or job.task == task)
        and (queue is None or job.queue == queue)
        and (state is None or job.state == state)
    )
