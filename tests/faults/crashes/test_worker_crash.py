"""(a) A worker SIGKILLed in the middle of a batch: its rows stay started (RUNNING) until their lease runs
out, nobody renewing it; the sweeper then requeues them as interrupted, and the next claim's attempt
fences any old copy. Nothing is lost; only rows the dead worker had already run are run again, once,
under a new attempt.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.faults.conftest import KINDS, RUNNING, FaultEnv

pytestmark = pytest.mark.faults

ROWS = 40
BATCH = 10
ROW_DELAY_MS = 200


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("sweeper", ["in_dispatcher", "once"])
def test_worker_sigkilled_mid_batch_loses_nothing(
    fault_env: Callable[..., FaultEnv], kind: str, sweeper: str
) -> None:
    """sweeper: the dispatcher's interval job, or `duecast sweeper --once` run after back-dating."""
    env = fault_env(kind)
    ids = env.insert(ROWS)
    env.dispatcher(DUECAST_DISPATCHER__RUN_SWEEPER=str(sweeper == "in_dispatcher").lower())
    env.wait_for(lambda: env.llen() == ROWS, "every row to be dispatched")

    marker = env.tmp / "victim.marker"
    victim = env.worker(
        "victim",
        DUECAST_WORKER__POP_BATCH=BATCH,
        DUECAST_TEST_ROW_DELAY_MS=ROW_DELAY_MS,
        DUECAST_TEST_BATCH_MARKER=marker,
    )
    batch = env.wait_batch(marker)
    assert len(batch.entries) == BATCH
    assert {e.attempt for e in batch.entries} == {1}
    env.wait_for(lambda: len(env.executions(victim.pid)) >= 2, "the victim to be half-way through its batch")
    env.procs.kill(victim)

    ran_by_victim = {e.id for e in env.executions(victim.pid)}
    assert 2 <= len(ran_by_victim) < BATCH, "the kill must land mid-batch"
    assert ran_by_victim <= batch.ids

    # Another worker runs everything else; the dead batch has no entry anywhere and no holder.
    survivor = env.worker("survivor")
    env.wait_for(
        lambda: env.pending() == batch.ids and env.llen() == 0,
        "the survivor to run every row outside the killed batch",
    )
    # Started, so neither the sweep of unstarted rows nor a lost entry can take them: their lease can.
    assert {i: env.rows()[i] for i in batch.ids} == dict.fromkeys(batch.ids, (RUNNING, 1))

    # Time passes in SQL: the dead batch's leases, renewed by nobody since the kill, have run out.
    assert env.back_date(batch.ids, attempt=1, seconds=env.source.lease_s + 1) == BATCH
    if sweeper == "once":
        assert env.sweep_once() == 0
        rows = env.rows()  # requeued by that sweep (and maybe already redelivered, or run)
        assert not [i for i in batch.ids if rows.get(i) == (RUNNING, 1)]
    env.wait_for(
        lambda: not env.pending(), "the sweeper to requeue the killed batch and the survivor to run it"
    )

    verdict = env.verdict(ids)
    assert not verdict.lost
    assert not verdict.unexpected
    assert not verdict.duplicates, "one execution per (id, attempt)"
    # Run twice: exactly the rows the victim ran before it died, under attempts 1 then 2.
    assert verdict.redundant == dict.fromkeys(sorted(ran_by_victim), (1, 2))
    assert not verdict.wrong_outcome
    for i in batch.ids:
        assert verdict.attempts(i)[-1] == 2
    assert verdict.ids_by(survivor.pid) == set(ids) - ran_by_victim | batch.ids
