"""(f) SIGTERM is a clean stop: a worker finishes and acks the batch it is in, then exits 0 without
taking another; an idle worker and a dispatcher exit 0 at once, even while Redis is down.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from functools import partial

import pytest

from tests.faults.conftest import DISPATCHED, KINDS, REDIS_DOWN, FaultEnv
from tests.faults.private_redis import PrivateRedis
from tests.faults.procs import Proc

pytestmark = pytest.mark.faults

ROW_DELAY_MS = 300
BATCH = 6


@pytest.mark.parametrize("kind", KINDS)
def test_worker_finishes_its_batch_acks_it_and_exits_0(fault_env: Callable[..., FaultEnv], kind: str) -> None:
    env = fault_env(kind)
    ids = env.insert(2 * BATCH + 4)
    dispatcher = env.dispatcher()
    env.wait_for(lambda: env.llen() == len(ids), "every row to be dispatched")
    marker = env.tmp / "worker.marker"
    worker = env.worker(
        "worker",
        DUECAST_WORKER__POP_BATCH=BATCH,
        DUECAST_TEST_ROW_DELAY_MS=ROW_DELAY_MS,
        DUECAST_TEST_BATCH_MARKER=marker,
    )
    batch = env.wait_batch(marker)
    assert len(batch.entries) == BATCH
    env.wait_for(lambda: env.executions(worker.pid), "the first row of the batch to run")

    env.procs.signal(worker, signal.SIGTERM)
    sent = time.monotonic()
    assert env.procs.wait_exit(worker, 15) == 0
    took_s = time.monotonic() - sent

    # The whole batch ran once and was acked (deleted); nothing else was taken.
    ran = env.executions(worker.pid)
    assert sorted(e.id for e in ran) == sorted(batch.ids)
    assert env.pending() == set(ids) - batch.ids
    assert env.llen() == len(ids) - BATCH
    assert {i: state for i, (state, _) in env.rows().items() if i not in batch.ids} == dict.fromkeys(
        env.pending(), DISPATCHED
    )
    assert not env.verdict(batch.ids).lost
    # At most the rest of the batch plus one pop's wait, with slack for a loaded machine.
    assert took_s < BATCH * ROW_DELAY_MS / 1000 + 3
    assert dispatcher.alive()


def test_idle_worker_and_dispatcher_exit_0_promptly(fault_env: Callable[..., FaultEnv]) -> None:
    env = fault_env("rescan")
    ids = env.insert(3)
    dispatcher = env.dispatcher()
    worker = env.worker("worker")
    env.wait_for(lambda: not env.pending(), "the rows to be dispatched and run")
    env.wait_listening(worker)

    for proc in (worker, dispatcher):
        env.procs.signal(proc, signal.SIGTERM)
        sent = time.monotonic()
        assert env.procs.wait_exit(proc, 10) == 0, proc.name
        assert time.monotonic() - sent < 3, f"{proc.name} took too long to stop"
    assert sorted(e.id for e in env.executions()) == ids


def test_sigterm_during_a_redis_outage_still_exits_0_promptly(
    fault_env: Callable[..., FaultEnv], private_redis: PrivateRedis
) -> None:
    """Bounded blocking: with Redis gone, both loops are failing and backing off, and still stop."""
    env = fault_env("rescan")
    env.use_redis(private_redis)
    env.insert(3)
    dispatcher = env.dispatcher(allow=REDIS_DOWN)
    worker = env.worker("worker", allow=REDIS_DOWN)
    env.wait_for(lambda: not env.pending(), "the rows to be dispatched and run")
    env.wait_listening(worker)

    private_redis.kill()
    for proc in (worker, dispatcher):
        env.wait_for(partial(_saw_redis_go, proc), f"{proc.name} to see Redis gone")
    for proc in (worker, dispatcher):
        env.procs.signal(proc, signal.SIGTERM)
        sent = time.monotonic()
        assert env.procs.wait_exit(proc, 20) == 0, proc.name
        assert time.monotonic() - sent < 3, f"{proc.name} took too long to stop"


def _saw_redis_go(proc: Proc) -> bool:
    return "ConnectionError" in proc.exceptions_logged()
