"""A worker start of a cluster group's deliveries whose COMMIT got no answer (issue 24.5), in process
on real MariaDB: the session is KILLed right after each group's first start's COMMIT was applied
(tests/faults/kill_at_start.py's fault). The worker's retry adopts the deliveries it did start: every
message is handled once per group, under attempt 1."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from duecast.shared.api.publish import Publish
from duecast.shared.states import State
from duecast.shared.storage import db
from tests.faults import kill_at_start
from tests.integration import topics_app
from tests.integration.topics.topics_env import CLUSTER, TopicsEnv

pytestmark = pytest.mark.integration
MESSAGES = 40


def test_deliveries_whose_start_lost_its_commit_answer_run_once_under_their_attempt(
    env: TopicsEnv, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    env.publisher.publish_many(Publish("orders", {"n": n}) for n in range(MESSAGES))
    monkeypatch.setenv("DUECAST_TEST_KILL_AT_COMMIT_DIR", str(tmp_path))
    monkeypatch.setattr(kill_at_start, "_fired", set())
    monkeypatch.setattr(db._Connection, "commit", kill_at_start.commit)
    env.run_once()
    cut = [json.loads(p.read_text()) for p in tmp_path.glob("*.json")]
    assert len(cut) >= len(CLUSTER), "each cluster group's first start lost its answer"
    for group in CLUSTER:
        assert sorted(topics_app.runs(group)) == list(range(1, MESSAGES + 1)), group  # each once
        assert {r.attempt for r in topics_app.RUNS if r.group == group} == {1}, group
        assert {s for s, _, _ in env.deliveries(group).values()} == {int(State.DONE)}, group
