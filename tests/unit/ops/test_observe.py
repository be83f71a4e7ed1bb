"""shared/telemetry/observe.py: the roles' counts reach the right Prometheus counters, and handler calls are
timed."""

from __future__ import annotations

import uuid

import pytest
from prometheus_client import REGISTRY, generate_latest

from duecast.shared.acks import Ack
from duecast.shared.api.handlers import Handler
from duecast.shared.telemetry import metrics, observe


def value(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def fresh_source() -> str:
    return f"s_{uuid.uuid4().hex[:8]}"  # counters are process-wide: a new label starts at 0


def test_every_redis_stats_field_has_a_counter() -> None:
    assert set(observe.STATS_METRICS.values()) <= set(metrics.COUNTERS)


def test_redis_field_names_become_metric_names() -> None:
    src = fresh_source()
    observe.record(src, {"claimed": 5, "bad": 2, "requeued": 3, "acked": 0})
    assert value("duecast_claimed_total", source=src) == 5
    assert value("duecast_bad_entries_total", source=src) == 2
    assert value("duecast_redeliveries_total", source=src) == 3
    assert REGISTRY.get_sample_value("duecast_acked_total", {"source": src}) is None  # 0 adds no sample


def test_a_field_without_a_metric_is_skipped_not_an_error() -> None:
    src = fresh_source()
    observe.record(src, {"recovered": 4, "acked": 1})
    assert value("duecast_acked_total", source=src) == 1


def test_count_adds_to_a_named_counter() -> None:
    src = fresh_source()
    observe.count(src, "dead", 2)
    observe.count(src, "dead", 0)
    assert value("duecast_dead_total", source=src) == 2
    with pytest.raises(KeyError):
        observe.count(src, "no_such_counter")


def test_a_timed_handler_observes_each_call_and_keeps_its_outcomes() -> None:
    src = fresh_source()

    def check(row: dict[str, object]) -> Ack | None:
        if row["id"] == 2:
            raise RuntimeError("boom")
        return None

    timed = Handler(src, observe.timed(check, src), batch=False)
    outcomes = timed.run([{"id": 1}, {"id": 2}, {"id": 3}])

    assert [type(o) for o in outcomes] == [Ack, RuntimeError, Ack]
    assert value("duecast_handler_duration_seconds_count", source=src) == 3  # failures are timed too
    assert value("duecast_handler_duration_seconds_sum", source=src) >= 0


def test_a_batch_handler_is_timed_once_per_call() -> None:
    src = fresh_source()
    timed = Handler(src, observe.timed(lambda rows: None, src), batch=True)
    assert timed.run([{"id": 1}, {"id": 2}]) == [Ack.default(), Ack.default()]
    assert value("duecast_handler_duration_seconds_count", source=src) == 1


def test_batch_done_observes_the_elapsed_time() -> None:
    src = fresh_source()
    observe.batch_done("worker", src, started_s=0.0)  # perf_counter() seconds ago: a positive value
    assert value("duecast_batch_duration_seconds_count", role="worker", source=src) == 1
    assert value("duecast_batch_duration_seconds_sum", role="worker", source=src) > 0


def test_no_created_series_is_exported_for_counters_or_histograms() -> None:
    """No `*_created` series: it doubles the series per label set, for a timestamp no chart uses."""
    src = fresh_source()
    metrics.add(src, {"acked": 2, "failed": 1})
    metrics.HANDLER_SECONDS.labels(source=src).observe(0.01)
    metrics.BATCH_SECONDS.labels(role="worker", source=src).observe(0.01)
    text = generate_latest(REGISTRY).decode()
    assert f'duecast_acked_total{{source="{src}"}} 2.0' in text
    assert f'duecast_handler_duration_seconds_count{{source="{src}"}} 1.0' in text
    assert "_created" not in text
