"""Topics, no network: the stepped retry policy, the settings' checks, message validation, and the
worker's choice of what to pop for a topic group."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from duecast.shared.api.publish import Publish, PublishError, encode
from duecast.shared.policy import dead_after_retries, stepped_delay_s
from duecast.shared.process.failures import StartupError
from duecast.shared.settings import RETRY_STEPS_S, Settings, TopicsSettings
from duecast.shared.storage.topic_schema import KINDS, topic_table_ddl
from duecast.worker.main import served_sources


def test_stepped_delays_follow_the_steps_then_repeat_the_last() -> None:
    steps = [10.0, 30.0, 60.0]
    assert [stepped_delay_s(n, steps) for n in (1, 2, 3, 4, 50)] == [10, 30, 60, 60, 60]
    assert stepped_delay_s(16, RETRY_STEPS_S) == 7200
    assert len(RETRY_STEPS_S) == 16  # the default max_retries: one step per retry
    with pytest.raises(ValueError, match="at least once"):
        stepped_delay_s(0, steps)


@given(st.integers(0, 1000), st.integers(0, 1000))
def test_dead_exactly_when_the_retries_are_used_up(errors_before: int, max_retries: int) -> None:
    # A message runs once, then max_retries more times: the failure of run max_retries + 1 is final.
    assert dead_after_retries(errors_before, max_retries) == (errors_before + 1 > max_retries)


def topics(**fields: Any) -> TopicsSettings:
    return TopicsSettings.model_validate({"names": ["orders"], **fields})


@pytest.mark.parametrize(
    ("groups", "message"),
    [
        ([{"topic": "nope", "name": "g"}], "not in topics.names"),
        ([{"topic": "orders", "name": "g"}, {"topic": "orders", "name": "g"}], "repeats"),
        ([{"topic": "orders", "name": "bad-name"}], "pattern"),
        ([{"topic": "orders", "name": "g", "mode": "fanout"}], "cluster"),
        ([{"topic": "orders", "name": "g", "start": "yesterday"}], "ISO time"),
        ([{"topic": "orders", "name": "g", "start": "2026-01-01T00:00:00"}], "with a zone"),
    ],
)
def test_bad_groups_are_refused_with_the_reason(groups: list[dict[str, Any]], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        topics(groups=groups)


def test_a_group_source_name_must_fit_a_source_name() -> None:
    with pytest.raises(ValidationError, match="47 characters"):
        TopicsSettings.model_validate(
            {"names": ["t" * 24], "groups": [{"topic": "t" * 24, "name": "g" * 24}]}
        )


@pytest.mark.parametrize("start", ["earliest", "latest", "1", "42", "2026-11-01T00:00:00+00:00"])
def test_good_start_positions(start: str) -> None:
    assert topics(groups=[{"topic": "orders", "name": "g", "start": start}]).groups[0].start == start


def test_cluster_groups_are_sources_and_broadcast_groups_are_not() -> None:
    settings = Settings(
        topics=topics(
            groups=[
                {"topic": "orders", "name": "billing"},
                {"topic": "orders", "name": "cache", "mode": "broadcast"},
            ]
        )
    )
    names = [s.name for s in settings.all_sources()]
    assert "topics.orders-billing" in names
    assert "topics.orders-cache" not in names
    src = settings.source("topics.orders-billing")
    assert (src.table, src.id_column, src.due_column) == ("duecast_deliveries", "seq", "run_at")
    # The worker pops a cluster group's list; a broadcast group's members read MySQL instead.
    registered = ["topics.orders-billing", "topics.orders-cache"]
    assert served_sources(settings, registered) == ["topics.orders-billing"]
    with pytest.raises(StartupError, match="does not declare"):
        served_sources(settings, ["topics.orders-unknown"])


def _nested(depth: int) -> Any:
    value: Any = 0
    for _ in range(depth):
        value = [value]
    return value


def test_a_payload_nested_up_to_the_cap_is_published() -> None:
    assert encode(Publish("orders", _nested(100)), topics())[2] == "[" * 100 + "0" + "]" * 100


@pytest.mark.parametrize(
    ("message", "why"),
    [
        (Publish("other", 1), "unknown topic"),
        (Publish("orders", float("inf")), "not JSON"),
        (Publish("orders", "\ud800"), "surrogate"),
        (Publish("orders", "x" * 100), "limit"),
        (Publish("orders", 1, key="k" * 192), "key"),
        (Publish("orders", 1, key="\ud800"), "key '\\\\ud800' holds a lone surrogate"),
        (Publish("orders", _nested(101)), "nested deeper than 100 levels"),
        (Publish("orders", {"a": _nested(100)}), "nested deeper than 100 levels"),
    ],
)
def test_bad_messages_are_refused_before_anything_is_written(message: Publish, why: str) -> None:
    with pytest.raises(PublishError, match=why):
        encode(message, topics(max_payload_bytes=64))


def test_a_good_message_is_compact_json() -> None:
    assert encode(Publish("orders", {"a": [1, "é"]}, key="k"), topics()) == ("orders", "k", '{"a":[1,"é"]}')


def test_the_reference_sql_matches_the_generated_ddl() -> None:
    path = Path(__file__).resolve().parents[3] / "sql" / "topics.sql"
    body = "\n".join(line for line in path.read_text().splitlines() if not line.startswith("--"))
    statements = [s.strip().removesuffix(";") for s in (body + "\n").split(";\n") if s.strip()]
    assert statements == [topic_table_ddl(TopicsSettings(), kind) for kind in KINDS]
