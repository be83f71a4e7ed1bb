"""A cluster group's deliveries started by a worker process its supervisor saw exit are interrupted
at once (worker/handback.py), with an attempt trace; another group's and another worker's are not.
Real MariaDB and Redis; the started batch is arranged in SQL."""

from __future__ import annotations

import pytest

from duecast.shared.process.runtime import build_stores
from duecast.shared.states import State
from duecast.worker.handback import Handback
from tests.integration.topics.topics_env import TopicsEnv

pytestmark = pytest.mark.integration
WHY = "interrupted: its worker process exited with code 69 before finishing it"


def test_an_exited_workers_deliveries_are_interrupted_now_and_traced(env: TopicsEnv) -> None:
    for n in range(4):
        env.publisher.publish("orders", {"n": n})
    stores = {s.src.name: s for s in build_stores(env.settings, env.settings.topics.group_sources())}
    billing, shipping = stores["topics.orders-billing"], stores["topics.orders-shipping"]
    assert len(billing.claim_due(10)) == 4
    assert len(shipping.claim_due(10)) == 4
    running = f"UPDATE {{deliveries}} SET dc_state = {int(State.RUNNING)}, started_at = NOW(6), "
    running += "lease_until = NOW(6) + INTERVAL 15 SECOND, worker = %s WHERE group_id = %s AND seq {}"
    env.query(running.replace("{}", "<= 2"), ("vm:7", billing.group_id))
    env.query(running.replace("{}", "> 2"), ("vm:8", billing.group_id))
    env.query(running.replace("{}", "> 0"), ("vm:8", shipping.group_id))

    back = Handback(env.settings).after_exit("vm:7", WHY)

    assert back.interrupted == 2
    rows = env.query(
        "SELECT group_id, seq, dc_state, interruptions, last_error FROM {deliveries} ORDER BY group_id, seq"
    )
    mine = [(seq, st, n, err) for g, seq, st, n, err in rows if g == billing.group_id and seq <= 2]
    assert mine == [(s, int(State.IDLE), 1, WHY) for s in (1, 2)]
    others = {
        (int(st), int(n))
        for g, seq, st, n, _ in rows
        if (g, seq) not in {(billing.group_id, 1), (billing.group_id, 2)}
    }
    assert others == {(int(State.RUNNING), 0)}
    traced = env.query(
        f"SELECT seq, outcome, worker, error FROM {env.table('attempts')} WHERE group_id = %s ORDER BY seq",
        (billing.group_id,),
    )
    assert traced == [(1, "interrupted", "vm:7", WHY), (2, "interrupted", "vm:7", WHY)]
