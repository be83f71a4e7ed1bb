"""An `async def` consumer of a cluster group: its messages overlap on the event loop and each is
marked done in the group once."""

from __future__ import annotations

from typing import Any

from duecast.shared.states import State
from tests.integration import async_app
from tests.integration.topics.topics_env import TopicsEnv

TALLY = async_app.TALLY


def test_an_async_consumer_handles_every_message_once(make_env: Any) -> None:
    env: TopicsEnv = make_env(
        names=["orders"], groups=[{"topic": "orders", "name": "billing", "start": "earliest"}]
    )
    env.settings = env.settings.model_copy(
        update={"worker": env.settings.worker.model_copy(update={"app": "tests.integration.async_app"})}
    )
    TALLY.reset()
    for i in range(120):
        env.publisher.publish("orders", {"n": i})
    env.run_once()
    assert TALLY.runs == {("message", i): 1 for i in range(120)}
    assert TALLY.peak >= 50  # awaiting together, not one after another
    states = env.deliveries("billing")
    assert len(states) == 120
    assert {state for state, _, _ in states.values()} == {int(State.DONE)}
