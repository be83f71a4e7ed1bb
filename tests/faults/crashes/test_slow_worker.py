"""(e) Slow workers. A live worker holds its rows locked, so the sweeper never takes them from it, even
past their visibility timeout. The realistic way a slow worker loses its rows is losing its MySQL
session: its locks go, the rows are requeued and run again under attempt + 1, and when the slow
handler finally returns, its late ack must not land, and the worker must carry on.
"""

from __future__ import annotations

import signal
from collections.abc import Callable

import pytest

from duecast.shared.fanout.keys import Entry
from tests.faults.conftest import DISPATCHED, IDLE, KINDS, SESSION_LOST, FaultEnv

pytestmark = pytest.mark.faults


def test_late_ack_after_losing_the_session_is_rejected(fault_env: Callable[..., FaultEnv]) -> None:
    # Re-scan source: its handler records the attempt it ran with, so the row says whose ack landed.
    env = fault_env("rescan")
    ids = env.insert(5)
    env.dispatcher()
    env.wait_for(lambda: env.llen() == len(ids), "the rows to be dispatched")

    gate, marker = env.tmp / "gate", env.tmp / "slow.marker"
    slow = env.worker("slow", allow=SESSION_LOST, DUECAST_TEST_GATE=gate, DUECAST_TEST_BATCH_MARKER=marker)
    batch = env.wait_batch(marker)
    assert batch.entries == tuple(Entry(i, 1) for i in ids)

    # The slow worker is parked in its handler with its batch's rows locked in its open transaction.
    # (Its other session is the heartbeat's: it holds no lock and stays.)
    (session,) = [s for s in env.mysql_sessions(slow) if env.rows_locked_by(s) >= len(ids)]
    env.query(f"KILL {session}")
    env.wait_for(lambda: not env.session_alive(session), "the slow worker's session to be gone")
    env.wait_for(lambda: env.held_count() == 0, "its locks to go with it")

    assert env.back_date(ids, attempt=1) == len(ids)
    env.wait_for(
        lambda: env.rows() == dict.fromkeys(ids, (DISPATCHED, 2)) and env.llen() == len(ids),
        "the sweeper to requeue the rows and the dispatcher to redeliver them as attempt 2",
    )
    fast = env.worker("fast")
    env.wait_for(lambda: not env.pending(), "the second worker to run attempt 2")
    assert env.column("checked_by_attempt") == dict.fromkeys(ids, 2)
    assert env.executions(slow.pid) == [], "the slow handler is still parked"

    # Let the slow handler finish: it runs attempt 1 late and tries to ack it on its dead session.
    gate.touch()
    env.wait_for(lambda: len(env.executions(slow.pid)) == len(ids), "the slow handler to finish")

    # It survives and keeps working: alone now, it runs new rows (on a new session, so its failed
    # ack is behind it).
    env.procs.signal(fast, signal.SIGTERM)
    assert env.procs.wait_exit(fast, 10) == 0
    more = env.insert(3, start=100)
    env.wait_for(lambda: not env.pending(), "the slow worker to run new rows")
    assert slow.alive()
    assert {e.id for e in env.executions(slow.pid)} == set(ids) | set(more)

    # The late ack did not land: every first row still records attempt 2 as the one that ran last.
    assert env.column("checked_by_attempt") == {**dict.fromkeys(ids, 2), **dict.fromkeys(more, 1)}
    assert env.rows() == {**dict.fromkeys(ids, (IDLE, 2)), **dict.fromkeys(more, (IDLE, 1))}
    verdict = env.verdict([*ids, *more])
    assert not verdict.lost
    assert not verdict.duplicates
    assert not verdict.wrong_outcome
    assert verdict.redundant == dict.fromkeys(ids, (1, 2))


@pytest.mark.parametrize("kind", KINDS)
def test_sweeper_never_takes_rows_a_live_worker_holds(fault_env: Callable[..., FaultEnv], kind: str) -> None:
    """Rows past their visibility timeout but locked by a live (slow) worker stay its own; an expired
    row nobody holds, further along the sweeper's index scan, is still requeued."""
    env = fault_env(kind)
    held = env.insert(5, due_ago_s=7300)
    (canary,) = env.insert(1, start=100, due_ago_s=7200)  # after the held rows in dc_due order
    env.dispatch_directly([*held, canary], attempt=1, ago_s=3600)  # all long expired
    env.push([Entry(i, 1) for i in held])  # the canary's entry is lost

    gate, marker = env.tmp / "gate", env.tmp / "slow.marker"
    slow = env.worker("slow", DUECAST_TEST_GATE=gate, DUECAST_TEST_BATCH_MARKER=marker)
    assert env.wait_batch(marker).ids == set(held)

    env.dispatcher()  # its sweeper now sees six expired rows, five of them locked by `slow`
    fast = env.worker("fast")
    env.wait_for(lambda: env.pending() == set(held), "the sweeper to requeue the canary and it to be run")
    assert [(e.id, e.attempt, e.pid) for e in env.executions()] == [(canary, 2, fast.pid)]
    assert {env.rows()[i] for i in held} == {(DISPATCHED, 1)}, "held rows must not be requeued"

    gate.touch()
    env.wait_for(lambda: not env.pending(), "the slow worker to finish and ack its batch")
    verdict = env.verdict([*held, canary])
    assert not verdict.lost
    assert not verdict.duplicates
    assert not verdict.redundant
    assert not verdict.wrong_outcome
    assert verdict.ids_by(slow.pid) == set(held)
