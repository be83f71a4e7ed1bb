"""A consumer's failure the database once refused to store (issue 25, items 1 and 7): a message
whose consumer raised with a lone surrogate in its text, or raised SystemExit, fails alone in its
group and is retried; the messages beside it are done in the same pass."""

from __future__ import annotations

import pytest

from duecast.shared.states import State
from tests.integration import topics_app
from tests.integration.topics.topics_env import TopicsEnv

pytestmark = pytest.mark.integration


def test_a_consumer_failure_with_a_surrogate_or_system_exit_fails_alone(env: TopicsEnv) -> None:
    fine = env.publisher.publish("orders", {})
    surrogate = env.publisher.publish("orders", {"fail_surrogate": ["billing"]})
    exits = env.publisher.publish("orders", {"exit": ["billing"]})
    after = env.publisher.publish("orders", {})
    env.run_once()

    billing = env.deliveries("billing")
    assert billing[fine] == billing[after] == (int(State.DONE), 0, 1)
    assert billing[surrogate] == billing[exits] == (int(State.IDLE), 1, 1)  # retried after its step
    assert all(
        env.deliveries(g)[m] == (int(State.DONE), 0, 1)
        for g in ("shipping", "audit")
        for m in (surrogate, exits)
    )
    trace = env.admin.trace("orders", surrogate)["billing"]
    assert "RuntimeError: cannot open report-\\udcff.csv" in trace["delivery"]["last_error"]
    assert "SystemExit: 4" in env.admin.trace("orders", exits)["billing"]["delivery"]["last_error"]
    assert topics_app.runs("billing").count(surrogate) == 1
