"""(e) Slow and stopped workers. A live worker holds its started rows by leases its keeper renews, so
the sweeper never takes them from it, however long its checks take. A worker that stops (SIGSTOP, a
stalled host) renews nothing: its rows come back once their leases run out and run again under
attempt + 1, and when it resumes nothing of its late run lands: its keeper finds the leases lost and
fences the process, or its ack finds the rows' attempt moved on.
"""

from __future__ import annotations

import signal
from collections.abc import Callable

import pytest

from duecast.shared.entries import Entry
from tests.faults.conftest import DISPATCHED, IDLE, KINDS, RESCAN_PERIOD_S, RUNNING, FaultEnv

pytestmark = pytest.mark.faults

EXIT_FENCED = 69  # shared.storage.leased.keeper: a lease lost, the process leaves without acking


def test_a_stopped_workers_rows_come_back_after_their_lease_and_its_late_run_never_lands(
    fault_env: Callable[..., FaultEnv],
) -> None:
    # Re-scan source: its handler records the attempt it ran with, so the row says whose ack landed.
    env = fault_env("rescan")
    ids = env.insert(5)
    env.dispatcher()
    env.wait_for(lambda: env.llen() == len(ids), "the rows to be dispatched")

    gate, marker = env.tmp / "gate", env.tmp / "slow.marker"
    slow = env.worker("slow", may_exit=True, DUECAST_TEST_GATE=gate, DUECAST_TEST_BATCH_MARKER=marker)
    batch = env.wait_batch(marker)
    assert batch.entries == tuple(Entry(i, 1) for i in ids)
    assert env.rows() == dict.fromkeys(ids, (RUNNING, 1))

    # The slow worker stops, its keeper with it; time passes in SQL until its leases ran out.
    env.procs.signal(slow, signal.SIGSTOP)
    assert env.back_date(ids, attempt=1, seconds=env.source.lease_s + 1) == len(ids)
    env.wait_for(
        lambda: env.rows() == dict.fromkeys(ids, (DISPATCHED, 2)) and env.llen() == len(ids),
        "the sweeper to requeue the rows as interrupted and the dispatcher to redeliver them as attempt 2",
    )
    fast = env.worker("fast")
    env.wait_for(lambda: not env.pending(), "the second worker to run attempt 2")
    assert env.column("checked_by_attempt") == dict.fromkeys(ids, 2)

    # It resumes with its handler free to finish attempt 1: its keeper finds the leases gone and
    # fences the process, or its late ack finds the rows' attempt moved on. Either way, no trace.
    gate.touch()
    env.procs.signal(slow, signal.SIGCONT)
    env.wait_for(
        lambda: not slow.alive() or env.stats().get("stale_acks", 0) == len(ids),
        "the slow worker to be fenced or to have its late ack rejected",
    )
    if not slow.alive():
        assert env.procs.wait_exit(slow, 10) == EXIT_FENCED
        assert "without acking" in slow.log.read_text()
    assert env.column("checked_by_attempt") == dict.fromkeys(ids, 2)
    assert env.rows() == dict.fromkeys(ids, (IDLE, 2))
    verdict = env.verdict(ids)
    assert not verdict.lost
    assert not verdict.duplicates, "one execution per (id, attempt)"
    assert not verdict.wrong_outcome
    assert fast.alive()


@pytest.mark.parametrize("kind", KINDS)
def test_sweeper_never_takes_rows_a_live_worker_holds(fault_env: Callable[..., FaultEnv], kind: str) -> None:
    """Rows a live (slow) worker started stay its own, past their visibility timeout and for as long
    as its keeper renews their leases; an expired row nobody started, further along the sweeper's
    index scan, is still requeued."""
    env = fault_env(kind)
    held = env.insert(5, due_ago_s=2 * RESCAN_PERIOD_S + 100)
    (canary,) = env.insert(1, start=100, due_ago_s=2 * RESCAN_PERIOD_S)  # after the held rows in dc_due order
    env.dispatch_directly([*held, canary], attempt=1, ago_s=3600)  # all long expired
    env.push([Entry(i, 1) for i in held])  # the canary's entry is lost

    gate, marker = env.tmp / "gate", env.tmp / "slow.marker"
    # Room for its five held rows only: a worker pops while its rows run, and the canary, requeued
    # and pushed again, must go to `fast` (popped by `slow`, it waited behind the gate until `slow`
    # left at its 30 s time limit: the race that failed this test in CI).
    slow = env.worker(
        "slow",
        DUECAST_TEST_GATE=gate,
        DUECAST_TEST_BATCH_MARKER=marker,
        DUECAST_WORKER__MAX_IN_FLIGHT=len(held),
    )
    assert env.wait_batch(marker).ids == set(held)
    # Time passes in SQL: 8 of the lease's 15 s are gone before its first renewal (5 s after the
    # start), so without that renewal the leases would run out while the sweeper watches.
    assert env.back_date(held, seconds=8) == len(held)

    env.dispatcher()  # its sweeper now sees six expired rows, five of them leased by `slow`
    fast = env.worker("fast")
    env.wait_for(lambda: env.pending() == set(held), "the sweeper to requeue the canary and it to be run")
    assert [(e.id, e.attempt, e.pid) for e in env.executions()] == [(canary, 2, fast.pid)]
    env.wait_for(lambda: env.leased_since(held) < 4, "the slow worker's keeper to renew its leases")
    assert {env.rows()[i] for i in held} == {(RUNNING, 1)}, "leased rows must not be requeued"

    gate.touch()
    env.wait_for(lambda: not env.pending(), "the slow worker to finish and ack its batch")
    verdict = env.verdict([*held, canary])
    assert not verdict.lost
    assert not verdict.duplicates
    assert not verdict.redundant
    assert not verdict.wrong_outcome
    assert verdict.ids_by(slow.pid) == set(held)
