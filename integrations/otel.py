"""OpenTelemetry traces for duecast jobs, built on its Middleware (`pip install duecast[otel]`): the
trace context of the code that enqueues is carried in the job's meta, and each run is a span in that
trace, a child of the enqueue's span; every attempt of one job shares that parent and is linked to it.
"""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any

from opentelemetry import propagate, trace
from opentelemetry.trace import Link, SpanKind, Status, StatusCode, Tracer, TracerProvider

from ..shared.acks import Row
from ..shared.api.context import JobContext
from ..shared.api.enqueue import Enqueuer
from ..shared.api.handlers import Registry
from ..shared.api.job_input import Job
from ..shared.api.middleware import Middleware

SCOPE = "duecast"


class Tracing(Middleware):
    """Spans for enqueues (PRODUCER) and runs (CONSUMER), with messaging attributes."""

    def __init__(self, tracer: Tracer) -> None:
        self.tracer = tracer

    def enqueue(self, job: Job) -> Job:
        with self.tracer.start_as_current_span(
            f"enqueue {job.task}",
            kind=SpanKind.PRODUCER,
            attributes={
                "messaging.system": "duecast",
                "messaging.destination.name": job.queue,
                "duecast.task": job.task,
            },
        ):
            carrier: dict[str, str] = dict(job.meta or {})
            propagate.inject(carrier)  # the current span's context: this enqueue's span
        return replace(job, meta=carrier)

    def run(self, job: JobContext, call: Callable[[], Any]) -> Any:
        with self._span(job):
            return call()

    async def arun(self, job: JobContext, call: Callable[[], Awaitable[Any]]) -> Any:
        with self._span(job):
            return await call()

    def _span(self, job: JobContext) -> Any:
        parent = propagate.extract(dict(job.meta))
        enqueue_span = trace.get_current_span(parent).get_span_context()
        links = [Link(enqueue_span)] if enqueue_span.is_valid else []
        return _RunSpan(
            self.tracer.start_as_current_span(
                f"run {job.task}",
                context=parent,
                kind=SpanKind.CONSUMER,
                links=links,
                attributes={
                    "messaging.system": "duecast",
                    "messaging.destination.name": job.queue,
                    "messaging.message.id": str(job.id),
                    "duecast.task": job.task,
                    "duecast.attempt": job.attempt,
                    "duecast.errors": job.errors,
                },
                record_exception=True,
                set_status_on_exception=True,
            )
        )


class TracingChecks(Tracing):
    """Tracing, and re-scan checks (and consumer calls) traced at `ratio`: each sampled call is an
    INTERNAL span of its own trace (a check has no enqueue to continue)."""

    def __init__(self, tracer: Tracer, ratio: float) -> None:
        super().__init__(tracer)
        self.ratio = ratio
        self._rng = random.Random()

    def check(self, source: str, rows: list[Row], call: Callable[[], Any]) -> Any:
        if self._rng.random() >= self.ratio:
            return call()
        with self._check_span(source, rows):
            return call()

    async def acheck(self, source: str, rows: list[Row], call: Callable[[], Awaitable[Any]]) -> Any:
        if self._rng.random() >= self.ratio:
            return await call()
        with self._check_span(source, rows):
            return await call()

    def _check_span(self, source: str, rows: list[Row]) -> Any:
        return _RunSpan(
            self.tracer.start_as_current_span(
                f"check {source}",
                kind=SpanKind.INTERNAL,
                attributes={"duecast.source": source, "duecast.rows": len(rows)},
                record_exception=True,
                set_status_on_exception=True,
            )
        )


class _RunSpan:
    """The run's span, marked as an error when the task raised (a failed attempt)."""

    def __init__(self, manager: Any) -> None:
        self._manager = manager

    def __enter__(self) -> Any:
        self._span = self._manager.__enter__()
        return self._span

    def __exit__(self, kind: Any, exc: Any, tb: Any) -> Any:
        if exc is not None:
            self._span.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}: {exc}"))
        return self._manager.__exit__(kind, exc, tb)


def instrument(
    *,
    enqueuer: Enqueuer | None = None,
    registry: Registry | None = None,
    tracer_provider: TracerProvider | None = None,
    check_ratio: float = 0.0,
) -> Tracing:
    """Trace `enqueuer`'s enqueues and `registry`'s task runs (either or both; call it once in the
    app that enqueues and once in the worker's app module), and with `check_ratio` > 0 that share
    of re-scan checks and consumer calls (0.001: one in a thousand). Returns the middleware added."""
    if not 0.0 <= check_ratio <= 1.0:
        raise ValueError(f"check_ratio must be 0-1, not {check_ratio!r}")
    tracer = trace.get_tracer(SCOPE, tracer_provider=tracer_provider)
    tracing = TracingChecks(tracer, check_ratio) if check_ratio > 0 else Tracing(tracer)
    if enqueuer is not None:
        enqueuer.use(tracing)
    if registry is not None:
        registry.use(tracing)
    return tracing
