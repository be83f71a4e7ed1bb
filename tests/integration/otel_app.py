"""A worker app traced with duecast.integrations.otel into an in-memory exporter (test_otel.py)."""

from __future__ import annotations

from typing import Any

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from duecast import Registry, current_job
from duecast.integrations.otel import instrument

EXPORTER = InMemorySpanExporter()
PROVIDER = TracerProvider()
PROVIDER.add_span_processor(SimpleSpanProcessor(EXPORTER))

tasks = Registry()


@tasks.task("traced")
def traced(payload: Any) -> None:
    pass


@tasks.task("traced_async")
async def traced_async(payload: Any) -> None:
    pass


@tasks.task("fails_once")
def fails_once(payload: Any) -> None:
    if current_job().errors == 0:
        raise RuntimeError("first attempt fails")


instrument(registry=tasks, tracer_provider=PROVIDER)
