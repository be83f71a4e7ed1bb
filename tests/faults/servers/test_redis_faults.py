"""(c) Redis is a disposable fan-out: a FLUSHALL or a restart mid-run (on a private redis-server) loses
entries, never work. The dispatcher's epoch canary notices that Redis lost its data and requeues
every dispatched row no worker holds at once, with no timeout to wait out; they are redelivered
under attempt 2, and the processes ride out the restart.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from duecast.shared.entries import decode_entry
from tests.faults.conftest import KINDS, REDIS_DOWN, FaultEnv
from tests.faults.private_redis import PrivateRedis
from tests.faults.procs import serving

pytestmark = pytest.mark.faults

ROWS = 300
CLAIM = 50
HIGH_WATER = 100  # the dispatcher keeps claiming as the list drains: the run is long and busy
ROW_DELAY_MS = 5


def _start_run(env: FaultEnv, *, allow: tuple[str, ...] = ()) -> list[int]:
    ids = env.insert(ROWS)
    workers = [env.worker(name, allow=allow, DUECAST_TEST_ROW_DELAY_MS=ROW_DELAY_MS) for name in ("w1", "w2")]
    env.dispatcher(allow=allow)
    # Both workers past their start-up too: one whose start-up check met the fault would end in its
    # one line (Redis unreachable at start is fatal, by design), while the other carried the run.
    env.wait_for(
        lambda: all(serving(w) for w in workers) and len(env.executions()) >= 40 and env.llen() >= 30,
        "both workers serving and the run under way with entries queued",
    )
    return ids


def _assert_each_row_ran_once(env: FaultEnv, ids: list[int]) -> set[int]:
    """No worker died, so every execution was acked: one per row. Returns the rows run as attempt 2."""
    verdict = env.verdict(ids)
    assert not verdict.lost
    assert not verdict.unexpected
    assert not verdict.duplicates
    assert not verdict.redundant
    assert not verdict.wrong_outcome
    assert all(p.alive() for p in env.procs.procs.values()), "every process survived"
    assert {a for i in ids for a in verdict.attempts(i)} <= {1, 2}
    return {i for i in ids if verdict.attempts(i) == [2]}


@pytest.mark.parametrize("kind", KINDS)
def test_flushall_mid_run_loses_nothing(
    fault_env: Callable[..., FaultEnv], private_redis: PrivateRedis, kind: str
) -> None:
    env = fault_env(kind, claim_batch=CLAIM, high_water=HIGH_WATER)
    env.use_redis(private_redis)
    ids = _start_run(env)

    # Read the list and flush in one MULTI: exactly these entries vanish.
    pipe = env.redis.pipeline(transaction=True)
    pipe.lrange(env.ready_key, 0, -1)
    pipe.flushall()
    raw, _ = pipe.execute()
    vanished = {decode_entry(r).id for r in raw}
    assert vanished

    # No back-dating: the canary, not the visibility timeout (an hour here), brings them back.
    # (Within 15 s: the visibility timeout here is 30 s, so this cannot be the sweeper.)
    env.wait_for(lambda: not env.pending(), "the dispatcher to requeue the rows whose entries vanished", 15)
    # Every vanished row ran once, as attempt 2. A batch the dispatcher pushed (or a worker popped
    # but had not locked) between the flush and the canary's check is requeued too: its attempt-1
    # entries are then stale, so those rows also ran once, as attempt 2, and never as attempt 1.
    rerun = _assert_each_row_ran_once(env, ids)
    assert vanished <= rerun


@pytest.mark.parametrize("kind", KINDS)
def test_redis_restart_mid_run_processes_survive_and_lose_nothing(
    fault_env: Callable[..., FaultEnv], private_redis: PrivateRedis, kind: str
) -> None:
    env = fault_env(kind, claim_batch=CLAIM, high_water=HIGH_WATER)
    env.use_redis(private_redis)
    # Every process logs connection errors while the server is down: expected here, nothing else.
    ids = _start_run(env, allow=REDIS_DOWN)

    private_redis.restart()  # SIGKILL, then a fresh empty server on the same port

    # Rows whose entries died with the server come back through the canary at once; a push that
    # failed while it was down gave its rows back. Nothing is left for a timeout.
    env.wait_for(lambda: not env.pending(), "the processes to reconnect and every row to run", 20)
    redelivered = _assert_each_row_ran_once(env, ids)
    assert redelivered, "the restart must have lost queued entries"
