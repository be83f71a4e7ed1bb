"""The user-facing handler API: a Registry of functions per source, plain or `async def`, and the
Ack they return. A handler never sees a connection or a Redis client: it gets rows (dicts) and says
what to do with each; the worker turns that into fenced, batched SQL.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, cast

from ..acks import Ack, Row
from ..identifiers import check_identifier
from ..settings import JOBS_SOURCE, ScheduleSettings, topic_source
from .context import JobContext, call_as, call_row_as, job_context, running
from .lifespan import Hook, Hooks
from .messages import Message
from .middleware import Middleware, achecked, awrapped, checked, checking, wrapped
from .outcomes import as_ack, outcome, task_outcome

# Each may be a plain function or an `async def` one (a coroutine function) returning the same.
RowHandler = Callable[[Row], Ack | None] | Callable[[Row], Awaitable[Ack | None]]
BatchHandler = (
    Callable[[list[Row]], Sequence[Ack | None] | None]
    | Callable[[list[Row]], Awaitable[Sequence[Ack | None] | None]]
)
TaskFunction = Callable[
    ..., Ack | Awaitable[Ack | None] | None
]  # fn(payload); fn(payload, cursor) if transactional
ConsumerFunction = Callable[
    ..., Ack | Awaitable[Ack | None] | None
]  # fn(message); transactional: (message, cursor)


AsyncFunction = Callable[..., Awaitable[Any]]
_log = logging.getLogger("duecast.worker")


@dataclass(frozen=True)
class Handler:
    """One registered handler: per-row functions are called once per row, batch ones once per slice.

    `fn` runs on a handler thread; `afn`, an `async def`, on the worker's event loop. A plain
    handler has one of them; the jobs source has both when its app mixes plain and async tasks, and
    `route(row)` says which a row takes and its own time limit (a task's `timeout_s`).
    """

    source: str
    fn: Callable[..., Any] | None
    batch: bool
    columns: tuple[str, ...] = ()  # what the worker reads for it; empty means every column
    afn: AsyncFunction | None = None
    route: Callable[[Row], tuple[bool, float | None]] | None = None

    def plan(self, row: Row) -> tuple[bool, float | None]:
        """(run it on the event loop?, its own time limit or None for the source's)."""
        if self.route is not None:
            return self.route(row)
        return self.fn is None, None

    async def run_one(self, row: Row) -> Ack:
        """An async row handler's outcome for one row (raises what the handler raised)."""
        assert self.afn is not None
        return as_ack(await self.afn(row))

    async def run_batch(self, rows: list[Row]) -> list[Ack | BaseException]:
        """An async batch handler's outcomes, as `run` gives a plain one's. The worker's own
        cancellation (its time limit) passes through; any other BaseException is the call's failure."""
        assert self.afn is not None
        try:
            result = await self.afn(rows)
        except asyncio.CancelledError:
            raise
        except BaseException as exc:
            return [exc] * len(rows)
        return self._outcomes(rows, result)

    def run(self, rows: list[Row]) -> list[Ack | BaseException]:
        """Outcome per row: its Ack, or the exception its handling raised (that row is not acked).
        Any BaseException: SystemExit or KeyboardInterrupt from user code (argparse, sys.exit() in
        a library) is that call's failure, retried as any other; caught here, it can neither kill
        the handler thread nor leave its batch-mates without an outcome."""
        fn = self.fn
        assert fn is not None
        if self.batch:
            try:
                result = fn(rows)
            except BaseException as exc:
                return [exc] * len(rows)
            return self._outcomes(rows, result)
        out: list[Ack | BaseException] = []
        for row in rows:
            try:
                out.append(as_ack(fn(row)))
            except BaseException as exc:
                out.append(exc)
        return out

    def _outcomes(self, rows: list[Row], result: object) -> list[Ack | BaseException]:
        try:
            acks = [Ack.default()] * len(rows) if result is None else list(result)  # type: ignore[call-overload]
        except BaseException as exc:  # not iterable, or a generator that raised
            return [exc] * len(rows)
        if len(acks) != len(rows):
            err = ValueError(
                f"batch handler for {self.source} returned {len(acks)} acks for {len(rows)} rows"
            )
            return [err] * len(rows)
        return [a if type(a) is Ack else outcome(a) for a in acks]  # an Ack as is: no call per row


class Registry:
    """Where a user module registers its handlers; the worker loads it with `--app module:attr`."""

    def __init__(self) -> None:
        self._handlers: dict[str, Handler] = {}
        self._tasks: dict[str, TaskFunction] = {}
        self._transactional: set[str] = set()
        self._async_tasks: set[str] = set()
        self._timeouts: dict[str, float] = {}
        self._schedules: list[ScheduleSettings] = []
        self._middleware: list[Middleware] = []
        self._hooks = Hooks()

    def on_start(self, fn: Hook) -> Hook:
        """Register `fn()` or `async def fn()` to run once in each worker process, before its first
        handler: open what handlers share (an aiohttp session, a connection pool). An async one runs
        on the worker's event loop, where async handlers run. If it raises, the worker does not start."""
        return self._hooks.add("start", fn)

    def on_stop(self, fn: Hook) -> Hook:
        """Register `fn()` or `async def fn()` to run once in each worker process, after its last
        handler finished (or was given up at the stop's grace period): close what on_start opened.
        Stops run in the reverse order of their registration; one that raises is logged, and the
        others still run."""
        return self._hooks.add("stop", fn)

    @property
    def hooks(self) -> Hooks:
        return self._hooks

    def row(self, source: str, columns: Sequence[str] = ()) -> Callable[[RowHandler], RowHandler]:
        """Register `fn(row) -> Ack | None` for `source`.

        `columns`: the columns the handler reads (the id and `dc_attempt` always come). Naming
        them is the cheapest speed-up there is: the worker reads and parses nothing else. The worker
        checks them against the table when it starts (a missing one stops it, naming source and column).
        """
        return self._register(source, batch=False, columns=columns)

    def batch(self, source: str, columns: Sequence[str] = ()) -> Callable[[BatchHandler], BatchHandler]:
        """Register `fn(rows) -> list[Ack | None] | None` for `source` (one call per slice of a batch)."""
        return self._register(source, batch=True, columns=columns)

    def task(
        self, name: str, *, transactional: bool = False, timeout_s: float | None = None
    ) -> Callable[[TaskFunction], TaskFunction]:
        """Register a one-off job task: `fn(payload)` or `async def fn(payload)`, where payload is
        the job's decoded JSON. Inside it, `duecast.current_job()` gives its id, attempt, queue, task
        and enqueued_at. An `async def` task runs on the worker's event loop, many at once.

        It returns None (done), `Ack.retry(...)` or `Ack.discard(...)`, or raises (a failure: retried
        with backoff, dead after max_attempts). `timeout_s`: a run taking longer is a failure
        (an async task is cancelled; a plain one is given up and its thread left to finish); default
        jobs.timeout_s. `transactional=True`: `fn(payload, cursor)` runs in the worker's ack
        transaction on the jobs database, so its writes commit if and only if the job is marked done
        (exactly-once effect for database-local work). Such tasks are plain functions and run one at
        a time on the worker's own thread; keep them short.
        """
        if not name or len(name) > 191:
            raise ValueError("a task name must be 1-191 characters")
        if timeout_s is not None and not 0 < timeout_s <= 7 * 86400:
            raise ValueError(f"task {name!r}: timeout_s must be > 0 and at most 7 days, not {timeout_s!r}")

        def decorate(fn: TaskFunction) -> TaskFunction:
            if name in self._tasks:
                raise ValueError(f"task {name!r} is registered twice")
            is_async = inspect.iscoroutinefunction(fn)
            if is_async and transactional:
                raise ValueError(
                    f"task {name!r}: a transactional task runs inside the ack transaction, so it must "
                    "be a plain function, not async def"
                )
            current = self._handlers.get(JOBS_SOURCE)
            if current is not None and current.route != self._route_job:
                raise ValueError(f"source {JOBS_SOURCE!r} has a custom handler, so tasks could never run")
            self._tasks[name] = fn
            if transactional:
                self._transactional.add(name)
            if is_async:
                self._async_tasks.add(name)
            if timeout_s is not None:
                self._timeouts[name] = timeout_s
            if JOBS_SOURCE not in self._handlers:
                self._handlers[JOBS_SOURCE] = Handler(
                    JOBS_SOURCE,
                    self._run_job,
                    batch=False,
                    columns=("task", "payload"),
                    route=self._route_job,
                )
            if is_async:  # the event loop serves the jobs source only once some task is async
                self._handlers[JOBS_SOURCE] = replace(self._handlers[JOBS_SOURCE], afn=self._run_job_async)
            return fn

        return decorate

    def _register(self, source: str, batch: bool, columns: Sequence[str]) -> Callable[[Any], Any]:
        cols = tuple(check_identifier(c) for c in columns)

        def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
            if source in self._handlers:
                raise ValueError(f"source {source!r} already has a handler")
            if inspect.iscoroutinefunction(fn):
                self._handlers[source] = Handler(source, None, batch, cols, afn=fn)
            else:
                self._handlers[source] = Handler(source, fn, batch, cols)
            return fn

        return decorate

    def consumer(
        self, topic: str, *, group: str, transactional: bool = False
    ) -> Callable[[ConsumerFunction], ConsumerFunction]:
        """Register `fn(message)` for consumer group `group` of `topic` (declared in topics.groups).

        Cluster groups: returns None (done), `Ack.retry(...)` or `Ack.discard(...)`, or raises (a
        failure: retried after the group's stepped delays, dead after its max_retries).
        `transactional=True`: `fn(message, cursor)` runs in the worker's ack transaction, so its
        writes commit if and only if the message is marked done in this group. Broadcast groups:
        the outcome is counted and logged; there are no acks and no retries.
        """
        source = topic_source(topic, group)

        def decorate(fn: ConsumerFunction) -> ConsumerFunction:
            if source in self._handlers:
                raise ValueError(f"group {group!r} of topic {topic!r} already has a consumer")
            if inspect.iscoroutinefunction(fn):
                if transactional:
                    raise ValueError(
                        f"consumer of {topic!r}/{group!r}: a transactional consumer runs inside the ack "
                        "transaction, so it must be a plain function, not async def"
                    )

                async def run_async(row: Row) -> Ack | None:
                    return await cast(Awaitable[Ack | None], fn(Message.from_row(topic, group, row)))

                self._handlers[source] = Handler(source, None, batch=False, afn=run_async)
                return fn

            plain = cast(Callable[..., Ack | None], fn)

            def run(row: Row) -> Ack | None:
                message = Message.from_row(topic, group, row)
                if transactional:
                    return Ack("transaction", work=lambda cursor: plain(message, cursor))
                return plain(message)

            self._handlers[source] = Handler(source, run, batch=False)
            return fn

        return decorate

    def _route_job(self, row: Row) -> tuple[bool, float | None]:
        name = row["task"]
        return name in self._async_tasks, self._timeouts.get(name)

    def _unknown(self, row: Row) -> Ack:
        """A job whose task this app does not register is dead at once, in one WARNING line: no
        attempt could run it, so retrying costs max_attempts tracebacks (docs/jobs.md, "Unknown
        tasks"); `duecast jobs retry` revives it once a worker knows the task."""
        known = ", ".join(sorted(self._tasks)) or "none"
        why = f"no task named {row['task']!r} is registered (registered: {known})"
        _log.warning(
            "job %s: %s; dead without retries",
            row.get("id"),
            why,
            extra={"event": "worker.unknown_task", "job_id": row.get("id"), "task": row["task"]},
        )
        return Ack.discard(why)

    async def _run_job_async(self, row: Row) -> Ack | None:
        fn = self._tasks.get(row["task"])
        if fn is None:
            return self._unknown(row)
        payload = json.loads(row["payload"])
        job = job_context(row)
        with running(job, asyncio.current_task()):  # the task's own asyncio Task copies this context
            call: Callable[[], Awaitable[Any]] = lambda: cast(Awaitable[Any], fn(payload))  # noqa: E731
            if self._middleware:
                call = awrapped(self._middleware, job, call)
            try:
                return task_outcome(await call())
            except asyncio.CancelledError:
                if not job.cancelled:
                    raise  # its time limit (worker/runner.py)
                return Ack.discard("cancelled")  # its row is cancelled: this finish is stale, unapplied

    def _run_job(self, row: Row) -> Ack | None:
        name, fn = row["task"], self._tasks.get(row["task"])
        if fn is None:
            return self._unknown(row)
        payload = json.loads(row["payload"])
        if not self._middleware and name not in self._transactional:  # the common case: no context
            return task_outcome(call_row_as(row, fn, payload))  # built unless current_job() asks
        job = job_context(row)  # what duecast.current_job() returns while fn runs
        if name in self._transactional:
            return Ack("transaction", work=lambda cursor: task_outcome(self._call(job, fn, payload, cursor)))
        return task_outcome(self._call(job, fn, payload))

    def _call(self, job: JobContext, fn: TaskFunction, *args: Any) -> Any:
        """fn(*args) as `job`, inside the run middleware (if any)."""
        if not self._middleware:
            return call_as(job, fn, *args)
        return call_as(job, wrapped(self._middleware, job, lambda: fn(*args)))

    def use(self, middleware: Middleware) -> Middleware:
        """Add run middleware (Middleware.run / arun) around every task of this Registry; the first
        added is outermost. Returns it."""
        if not isinstance(middleware, Middleware):
            raise TypeError(f"Registry.use takes a duecast Middleware, not {type(middleware).__name__}")
        self._middleware.append(middleware)
        return middleware

    def schedule(
        self,
        name: str,
        task: str,
        *,
        cron: str | None = None,
        every_s: float | None = None,
        payload: Any = None,
        **options: Any,
    ) -> ScheduleSettings:
        """Declare a recurring job in code (the dispatcher runs it when started with this app).

        Same fields as a `[[jobs.schedules]]` entry in settings: cron or every_s, and optionally
        timezone, queue, priority, missed ("coalesce" | "all" | "skip").
        """
        sched = ScheduleSettings(name=name, task=task, cron=cron, every_s=every_s, payload=payload, **options)
        if any(s.name == name for s in self._schedules):
            raise ValueError(f"schedule {name!r} is declared twice")
        self._schedules.append(sched)
        return sched

    @property
    def schedules(self) -> list[ScheduleSettings]:
        return list(self._schedules)

    @property
    def task_names(self) -> frozenset[str]:
        return frozenset(self._tasks)

    @property
    def sources(self) -> list[str]:
        return sorted(self._handlers)

    def include(self, other: Registry) -> None:
        """Add `other`'s handlers, tasks, schedules and hooks to this one: a worker serving two apps
        (`--app a --app b`). A source, task or schedule both declare is an error, never a silent pick."""
        self._middleware += [mw for mw in other._middleware if mw not in self._middleware]
        for source, handler in other._handlers.items():
            if source != JOBS_SOURCE:
                if source in self._handlers:
                    raise ValueError(f"source {source!r} already has a handler")
                self._handlers[source] = handler
        for name, fn in other._tasks.items():
            self.task(name, transactional=name in other._transactional, timeout_s=other._timeouts.get(name))(
                fn
            )
        for sched in other._schedules:
            if any(s.name == sched.name for s in self._schedules):
                raise ValueError(f"schedule {sched.name!r} is declared twice")
            self._schedules.append(sched)
        self._hooks.include(other._hooks)

    def handler(self, source: str) -> Handler:
        try:
            handler = self._handlers[source]
        except KeyError:
            raise KeyError(f"no handler registered for source {source!r}") from None
        around = checking(self._middleware) if source != JOBS_SOURCE else []
        if not around:
            return handler
        return replace(
            handler,
            fn=None if handler.fn is None else checked(around, source, handler.fn),
            afn=None if handler.afn is None else achecked(around, source, handler.afn),
        )
