"""A cluster group's claim says which of its entries come back (requeued, retried, interrupted): the
dispatcher pushes those ahead of the backlog (issue 24, item 6; tests/integration/jobs/
test_returning_first.py pushes them)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.integration.topics.test_topic_operations import cluster_store

pytestmark = pytest.mark.integration


def test_a_groups_claim_counts_its_requeued_deliveries_first(make_env: Any) -> None:
    env = make_env()
    store = cluster_store(env, "-audit")
    env.publisher.publish("orders", "a")
    (lost,) = store.claim_due(10)
    assert store.returning == 0  # a new message
    env.query("UPDATE {deliveries} SET dc_dispatched_at = NOW(6) - INTERVAL 1 HOUR")
    assert store.requeue_expired(60, 100) == 1  # its entry never reached a worker
    env.publisher.publish("orders", "b")
    again, new = store.claim_due(10)
    assert (again.id, again.attempt) == (lost.id, lost.attempt + 1)
    assert new.attempt == 1
    assert store.returning == 1  # the requeued one, ahead of the new message
