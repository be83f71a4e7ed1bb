"""OpenTelemetry (issue 23): the trace of the code that enqueues reaches the run; each attempt of a job
is a span, child of (and linked to) the enqueue's span; without the integration nothing is carried."""

from __future__ import annotations

import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanKind, StatusCode

from duecast.integrations.otel import instrument
from duecast.shared.api.enqueue import Enqueuer
from duecast.shared.fanout.client import connect_redis
from tests.integration import otel_app
from tests.integration.jobs.jobs_env import JobsEnv

APP = "tests.integration.otel_app:tasks"


@pytest.fixture
def traced(env: JobsEnv) -> tuple[JobsEnv, Enqueuer]:
    env = env.with_app(APP, frozenset())
    enqueuer = Enqueuer(env.settings, connect_redis(env.settings.redis), None)
    instrument(enqueuer=enqueuer, tracer_provider=otel_app.PROVIDER)
    otel_app.EXPORTER.clear()
    return env, enqueuer


def spans(name: str) -> list[ReadableSpan]:
    return [s for s in otel_app.EXPORTER.get_finished_spans() if s.name == name]


def test_enqueue_and_run_share_the_callers_trace(traced: tuple[JobsEnv, Enqueuer]) -> None:
    env, enqueuer = traced
    tracer = otel_app.PROVIDER.get_tracer("the-app")
    with tracer.start_as_current_span("POST /orders") as request:
        enqueuer.enqueue("traced", 1)
        enqueuer.enqueue("traced_async", 2)
    env.run_once()
    trace_id = request.get_span_context().trace_id
    for task in ("traced", "traced_async"):
        [enqueued] = spans(f"enqueue {task}")
        [ran] = spans(f"run {task}")
        assert enqueued.kind == SpanKind.PRODUCER
        assert ran.kind == SpanKind.CONSUMER
        assert enqueued.context.trace_id == ran.context.trace_id == trace_id
        assert enqueued.parent is not None
        assert enqueued.parent.span_id == request.get_span_context().span_id
        assert ran.parent is not None
        assert ran.parent.span_id == enqueued.context.span_id
        assert ran.attributes is not None
        assert ran.attributes["duecast.attempt"] == 1


def test_each_attempt_is_a_span_linked_to_the_enqueue(traced: tuple[JobsEnv, Enqueuer]) -> None:
    env, enqueuer = traced
    job = enqueuer.enqueue("fails_once", None, max_attempts=3)
    for _ in range(2):
        env.run_once()
        env.make_due()  # the backoff has passed
    [enqueued] = spans("enqueue fails_once")
    runs = sorted(spans("run fails_once"), key=lambda s: s.start_time or 0)
    assert len(runs) == 2
    assert [r.attributes["duecast.attempt"] for r in runs if r.attributes] == [1, 2]
    assert [r.status.status_code for r in runs] == [StatusCode.ERROR, StatusCode.UNSET]
    assert any(e.name == "exception" for e in runs[0].events)
    for run in runs:
        assert run.context.trace_id == enqueued.context.trace_id
        assert run.parent is not None
        assert run.parent.span_id == enqueued.context.span_id
        assert [link.context.span_id for link in run.links] == [enqueued.context.span_id]
    assert not env.exists(job)  # done on its second attempt (done jobs are deleted at once)


def test_without_the_integration_no_meta_is_carried(env: JobsEnv) -> None:
    plain = Enqueuer(env.settings, connect_redis(env.settings.redis), None)
    job = plain.enqueue("record", 1)
    assert env.job(job, "meta") == (None,)
