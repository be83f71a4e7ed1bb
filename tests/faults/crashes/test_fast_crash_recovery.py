"""Fast crash recovery: a worker SIGKILLed mid-batch leaves its started rows leased, and they are
back once their leases run out; one killed the moment its pop returns stops beating, and once its
heartbeat is older than worker.dead_after_s (back-dated in SQL) the leader's redelivery requeues
the batch it had popped at once. Both well before the visibility timeout (30 s here)."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable

import pytest

from duecast.shared.entries import decode_entry
from duecast.shared.fanout.queue import ReadyQueue
from tests.faults.conftest import DISPATCHED, KILL_AFTER_POP, KINDS, RUNNING, WAIT_S, FaultEnv

pytestmark = pytest.mark.faults

FAST = {"DUECAST_WORKER__HEARTBEAT_S": 0.5, "DUECAST_WORKER__DEAD_AFTER_S": 2}


@pytest.mark.parametrize("kind", KINDS)
def test_a_dead_workers_batch_is_back_once_its_leases_run_out_not_after_the_visibility_timeout(
    fault_env: Callable[..., FaultEnv], kind: str
) -> None:
    """What it had started is leased: back once the leases run out (lease_s, 15 s here, below the
    30 s visibility timeout), without waiting for its silence to be noticed; what it had popped and
    not started goes back by its silence (the next test)."""
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
    assert {env.rows()[i] for i in batch.ids} == {(RUNNING, 1)}

    # Time passes in SQL: a lease and a second since the victim's last renewal. Nothing else is
    # back-dated: no dispatch is anywhere near the visibility timeout.
    assert env.back_date(batch.ids, seconds=env.source.lease_s + 1) == len(batch.ids)
    env.wait_for(lambda: not env.pending(), "redelivery to requeue the dead worker's batch", timeout=10)
    verdict = env.verdict(ids)
    assert not verdict.lost
    assert not verdict.unexpected
    assert not verdict.duplicates
    assert {i: verdict.attempts(i)[-1] for i in batch.ids} == dict.fromkeys(batch.ids, 2)


@pytest.mark.parametrize("kind", KINDS)
def test_a_worker_killed_the_moment_its_pop_returns_has_held_what_it_popped(
    fault_env: Callable[..., FaultEnv], kind: str
) -> None:
    """The pop and the hold are one Redis script: there is no instant at which the entries are
    neither in the ready list nor in the hold (tests/faults/kill_after_pop.py runs the real worker
    with a queue that SIGKILLs it as soon as the pop returns, before any SQL)."""
    env = fault_env(kind)
    ids = env.insert(30)
    # Dead workers are looked for every heartbeat_s; dead_after_s stays at 15 s, so only the back-dating below
    # makes the victim dead.
    dispatcher = env.dispatcher(DUECAST_WORKER__HEARTBEAT_S=0.5)
    env.wait_for(lambda: env.llen() == 30, "every row to be dispatched")
    victim = env.worker("victim", module=KILL_AFTER_POP, may_exit=True)
    assert env.procs.wait_exit(victim, WAIT_S) == -signal.SIGKILL
    (name,) = [
        str(n)
        for (n,) in env.query("SELECT name FROM duecast_workers WHERE name LIKE %s", (f"%:{victim.pid}",))
    ]

    # What it popped (pop_batch 10) is in its hold, and nowhere else: not in the list, not started.
    held = ReadyQueue(env.redis, env.keys).held_by(name)
    assert held is not None, "the pop returned, so its entries must be held"
    popped = {decode_entry(raw).id for raw in held[1]}
    assert (held[0], len(popped), env.llen()) == (env.source.name, 10, 20)
    assert not env.executions()
    assert {env.rows()[i] for i in popped} == {(DISPATCHED, 1)}

    env.worker("survivor")
    env.wait_for(lambda: env.pending() == popped, "the survivor to run everything else")
    assert {env.rows()[i] for i in popped} == {(DISPATCHED, 1)}, "stranded until redelivery acts"

    # Time passes in SQL: the victim has been silent for a minute. Nothing else is back-dated.
    env.query(
        "UPDATE duecast_workers SET heartbeat_at = NOW(6) - INTERVAL 60 SECOND WHERE name = %s", (name,)
    )
    env.wait_for(lambda: not env.pending(), "redelivery to requeue the dead worker's pop", timeout=10)
    assert f"worker {name} is silent: requeued the 10 rows" in dispatcher.log.read_text()
    assert env.redis.exists(env.keys.inflight(name)) == 0
    verdict = env.verdict(ids)
    assert not verdict.lost
    assert not verdict.unexpected
    assert not verdict.duplicates
    assert not verdict.redundant, "the victim ran nothing"
    assert {i: tuple(verdict.attempts(i)) for i in popped} == dict.fromkeys(popped, (2,))


def test_a_corrupt_hold_does_not_keep_the_other_dead_workers_rows_waiting(
    fault_env: Callable[..., FaultEnv],
) -> None:
    """Issue 16.2: three workers SIGKILLed as their pops return; the hold record of the one the leader
    reads first (name order) is overwritten with 0xff bytes. It is quarantined and counted, and the
    other two's rows are requeued at once, not after the visibility timeout (30 s here). Before,
    every look for dead workers failed at that record (UnicodeDecodeError), every heartbeat."""
    env = fault_env("oneoff")
    ids = env.insert(40)
    dispatcher = env.dispatcher(DUECAST_WORKER__HEARTBEAT_S=0.5)
    env.wait_for(lambda: env.llen() == 40, "every row to be dispatched")
    for i in range(3):
        victim = env.worker(f"victim-{i}", module=KILL_AFTER_POP, may_exit=True)
        assert env.procs.wait_exit(victim, WAIT_S) == -signal.SIGKILL
    names = sorted(str(n) for (n,) in env.query("SELECT name FROM duecast_workers"))  # the leader's order
    queue = ReadyQueue(env.redis, env.keys)
    held: dict[str, set[int]] = {}
    for name in names:
        record = queue.held_by(name)
        assert record is not None, f"{name} was killed after its pop, so it holds what it popped"
        held[name] = {decode_entry(raw).id for raw in record[1]}
    corrupt, healthy = names[0], held[names[1]] | held[names[2]]
    garbage = b"\xff" * 64
    env.redis.set(env.keys.inflight(corrupt), garbage)
    env.worker("survivor")
    env.wait_for(lambda: env.pending() == healthy | held[corrupt], "the survivor to run the 10 rows left")

    # Time passes in SQL: the three have been silent for a minute. Nothing else is back-dated.
    env.query(
        "UPDATE duecast_workers SET heartbeat_at = NOW(6) - INTERVAL 60 SECOND WHERE name IN %s",
        (tuple(names),),
    )
    silent = time.monotonic()
    env.wait_for(lambda: not env.pending() & healthy, "the healthy holds to be requeued and run", timeout=10)
    print(f"healthy dead workers' 20 rows run {time.monotonic() - silent:.2f}s after they were found silent")
    assert env.pending() == held[corrupt], "the corrupt hold names no rows: the visibility timeout's"
    said = f"worker {corrupt} is silent and its hold record in Redis does not parse (no_source_line)"
    assert said in dispatcher.log.read_text()
    assert queue.quarantined("-") == [f"hold:{corrupt}:no_source_line ".encode() + garbage]
    assert queue.stats("-") == {"bad_holds": 1}
    assert env.query("SELECT COUNT(*) FROM duecast_workers WHERE name IN %s", (tuple(names),)) == [(0,)]

    assert env.back_date(held[corrupt]) == 10  # ...which passes, in SQL
    env.wait_for(lambda: not env.pending(), "the sweep to requeue the corrupt hold's rows")
    verdict = env.verdict(ids)
    assert not verdict.lost
    assert not verdict.unexpected
    assert not verdict.duplicates
    assert not verdict.redundant, "the victims ran nothing"
