"""integrations/otel.py on re-scan checks: traced at check_ratio, not wrapped at all at 0."""

from __future__ import annotations

from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from duecast import Ack, Registry
from duecast.integrations.otel import instrument
from tests.unit.rules.test_handlers_async import arun


def traced_registry(ratio: float) -> tuple[Registry, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    registry = Registry()

    @registry.row("users")
    def check(row: Any) -> Ack | None:
        if row["id"] == 13:
            raise RuntimeError("unlucky")
        return None

    @registry.batch("accounts")
    async def check_many(rows: list[Any]) -> None:
        return None

    instrument(registry=registry, tracer_provider=provider, check_ratio=ratio)
    return registry, exporter


def test_every_check_is_a_span_at_ratio_one_and_a_failure_is_an_error() -> None:
    registry, exporter = traced_registry(1.0)
    outcomes = registry.handler("users").run([{"id": 1}, {"id": 13}])
    assert outcomes[0] == Ack.default()
    assert isinstance(outcomes[1], RuntimeError)
    arun(registry.handler("accounts").run_batch([{"id": 1}, {"id": 2}]))
    spans = exporter.get_finished_spans()
    assert [(s.name, s.attributes["duecast.rows"] if s.attributes else None) for s in spans] == [
        ("check users", 1),
        ("check users", 1),
        ("check accounts", 2),
    ]
    assert [s.status.status_code for s in spans[:2]] == [StatusCode.UNSET, StatusCode.ERROR]


def test_at_ratio_zero_checks_are_not_wrapped() -> None:
    registry, exporter = traced_registry(0.0)
    assert registry.handler("users") is registry.handler("users")  # the registered one, as is
    registry.handler("users").run([{"id": 1}])
    assert exporter.get_finished_spans() == ()


def test_a_ratio_outside_zero_to_one_is_refused() -> None:
    with pytest.raises(ValueError, match="check_ratio must be 0-1"):
        instrument(registry=Registry(), check_ratio=1.5)
