"""Fast crash recovery for re-scan rows: a worker SIGKILLed mid-batch stops beating; once its heartbeat
is older than worker.dead_after_s (back-dated in SQL), the leader's reaper requeues the batch it had
popped at once, well before the visibility timeout (30 s here), and a survivor runs it."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.faults.conftest import KINDS, FaultEnv

pytestmark = pytest.mark.faults

FAST = {"DUECAST_WORKER__HEARTBEAT_S": 0.5, "DUECAST_WORKER__DEAD_AFTER_S": 2}


@pytest.mark.parametrize("kind", KINDS)
def test_a_dead_workers_batch_is_requeued_by_its_silence_not_the_visibility_timeout(
    fault_env: Callable[..., FaultEnv], kind: str
) -> None:
    env = fault_env(kind)
    ids = env.insert(30)
    env.dispatcher(**FAST)
    env.wait_for(lambda: env.llen() == 30, "every row to be dispatched")
    marker = env.tmp / "victim.marker"
    victim = env.worker(
        "victim",
        DUECAST_WORKER__POP_BATCH=10,
        DUECAST_TEST_ROW_DELAY_MS=200,
        DUECAST_TEST_BATCH_MARKER=marker,
        **FAST,
    )
    batch = env.wait_batch(marker)
    env.procs.kill(victim)
    env.worker("survivor", **FAST)
    env.wait_for(lambda: env.pending() == batch.ids, "the survivor to run everything else")

    # Time passes in SQL: the victim has been silent for a minute. Nothing else is back-dated.
    env.query(
        "UPDATE duecast_workers SET heartbeat_at = NOW(6) - INTERVAL 60 SECOND WHERE name LIKE %s",
        (f"%:{victim.pid}",),
    )
    env.wait_for(lambda: not env.pending(), "the reaper to requeue the dead worker's batch", timeout=10)
    verdict = env.verdict(ids)
    assert not verdict.lost
    assert not verdict.unexpected
    assert not verdict.duplicates
    assert env.query("SELECT COUNT(*) FROM duecast_workers WHERE name LIKE %s", (f"%:{victim.pid}",)) == [
        (0,)
    ]
