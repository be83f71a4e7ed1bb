"""(b) A dispatcher that dies between COMMIT and RPUSH (tests/faults/crash_after_commit.py runs the
real one with a queue whose push exits 70): its claim is committed, so the rows are DISPATCHED with
no entry in Redis. Nothing is lost: once past the visibility timeout the leader's redelivery
requeues them and a normal dispatcher redelivers them under attempt 2.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.faults.conftest import CRASH_AFTER_COMMIT, DISPATCHED, IDLE, KINDS, FaultEnv
from tests.faults.crash_after_commit import EXIT_CODE

pytestmark = pytest.mark.faults

ROWS = 50
CLAIM = 20


@pytest.mark.parametrize("kind", KINDS)
def test_dispatcher_killed_between_commit_and_push_loses_nothing(
    fault_env: Callable[..., FaultEnv], kind: str
) -> None:
    env = fault_env(kind, claim_batch=CLAIM)
    ids = env.insert(ROWS)

    crashing = env.dispatcher("crashing", module=CRASH_AFTER_COMMIT, may_exit=True)
    assert env.procs.wait_exit(crashing, 20) == EXIT_CODE
    rows = env.rows()
    claimed = {i for i, (state, _) in rows.items() if state == DISPATCHED}
    assert len(claimed) == CLAIM
    assert {rows[i] for i in claimed} == {(DISPATCHED, 1)}
    assert {rows[i] for i in set(ids) - claimed} == {(IDLE, 0)}
    assert env.llen() == 0, "the claim was committed but never pushed"

    env.worker("w1")
    env.worker("w2")
    env.dispatcher()
    env.wait_for(
        lambda: env.pending() == claimed, "the rows the crash did not claim to be dispatched and run"
    )
    assert not {e.id for e in env.executions()} & claimed
    assert {env.rows()[i] for i in claimed} == {(DISPATCHED, 1)}, "not requeued before their timeout"

    assert env.back_date(claimed, attempt=1) == CLAIM
    env.wait_for(
        lambda: not env.pending(), "redelivery to requeue the stranded claim and it to be redelivered"
    )

    verdict = env.verdict(ids)
    assert not verdict.lost
    assert not verdict.unexpected
    assert not verdict.duplicates
    assert not verdict.redundant, "attempt 1 of the stranded rows never reached a worker"
    assert not verdict.wrong_outcome
    assert {i: tuple(verdict.attempts(i)) for i in claimed} == dict.fromkeys(claimed, (2,))
    unclaimed = set(ids) - claimed
    assert {i: tuple(verdict.attempts(i)) for i in unclaimed} == dict.fromkeys(unclaimed, (1,))
