"""(d) The same entry queued several times (a retried RPUSH, a replayed list) runs once per attempt:
the first worker to start the row runs it; the start is committed (RUNNING) before its handler runs,
so a copy finds the row no longer dispatched under that attempt, at once, whatever becomes of the
holder: it is running, it failed, or it was killed.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from duecast.shared.entries import Entry
from tests.faults.conftest import DISPATCHED, IDLE, KINDS, RUNNING, FaultEnv

pytestmark = pytest.mark.faults

COPIES = 3


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("pop_batch", [1, 10])
def test_entry_pushed_three_times_runs_once(
    fault_env: Callable[..., FaultEnv], kind: str, pop_batch: int
) -> None:
    """pop_batch=1: the two workers race for copies of one row; 10: copies also meet in one batch."""
    env = fault_env(kind)
    ids = env.insert(10)
    env.dispatch_directly(ids, attempt=1)
    workers = [
        env.worker(name, DUECAST_WORKER__POP_BATCH=pop_batch, DUECAST_TEST_ROW_DELAY_MS=50)
        for name in ("w1", "w2")
    ]
    for w in workers:
        env.wait_listening(w)

    # Copies back to back, so both blocked workers get copies of the same row at once.
    env.push([Entry(i, 1) for i in ids for _ in range(COPIES)])
    env.wait_for(
        lambda: not env.pending() and env.stats().get("popped", 0) == COPIES * len(ids),
        "every copy to be popped and every row to be run",
    )

    verdict = env.verdict(ids)
    assert not verdict.lost
    assert not verdict.duplicates, "one execution per (id, attempt)"
    assert not verdict.redundant
    assert not verdict.wrong_outcome
    assert sorted(e.id for e in verdict.executions) == ids
    assert env.stats().get("stale_entries", 0) == (COPIES - 1) * len(ids)


@pytest.mark.parametrize("kind", KINDS)
def test_copy_of_a_row_being_checked_is_stale_at_once(fault_env: Callable[..., FaultEnv], kind: str) -> None:
    """The holder is parked in its handler: the other worker's copies find the row started (no lock
    to wait for, however long mysql.lock_wait_s is), count as stale entries, and run nothing."""
    env = fault_env(kind)
    (row,) = env.insert(1)
    env.dispatch_directly([row], attempt=1)
    gate = env.tmp / "gate"
    markers = {name: env.tmp / f"{name}.marker" for name in ("w1", "w2")}
    workers = {
        name: env.worker(
            name,
            DUECAST_WORKER__POP_BATCH=1,
            DUECAST_MYSQL__LOCK_WAIT_S=30,
            DUECAST_MYSQL__READ_TIMEOUT_S=60,
            DUECAST_TEST_GATE=gate,
            DUECAST_TEST_BATCH_MARKER=marker,
        )
        for name, marker in markers.items()
    }
    for w in workers.values():
        env.wait_listening(w)

    env.push([Entry(row, 1)] * COPIES)
    env.wait_for(lambda: any(m.exists() for m in markers.values()), "one worker to start the row")
    holder = next(name for name, m in markers.items() if m.exists())
    # Well inside one lock wait (30 s): the copies never waited for anything.
    env.wait_for(
        lambda: env.llen() == 0 and env.stats().get("stale_entries", 0) == COPIES - 1,
        "the copies to be popped and found stale",
        timeout=10,
    )
    assert env.stats().get("locked_skipped", 0) == 0
    assert env.pending() == {row}, "the holder has not acked yet"
    assert env.rows() == {row: (RUNNING, 1)}
    gate.touch()
    env.wait_for(lambda: not env.pending(), "the holder to run and ack the row")

    verdict = env.verdict([row])
    assert not verdict.lost
    assert not verdict.duplicates
    assert not verdict.wrong_outcome
    assert [e.pid for e in verdict.executions] == [workers[holder].pid]
    assert not any(m.exists() for name, m in markers.items() if name != holder)


@pytest.mark.parametrize("holder_fate", ["killed", "handler_fails"])
def test_a_copy_never_reruns_an_attempt_whose_holder_did_not_ack(
    fault_env: Callable[..., FaultEnv], holder_fate: str
) -> None:
    """The holder of a row runs it and then never acks it (SIGKILLed, or its handler raises), with
    copies of the same entry arriving before and after. None of them runs the attempt again: the
    start was committed before the handler ran. (Formerly a KNOWN LIMIT: a copy waiting for the
    holder's row lock ran the attempt again once a SIGKILL rolled the holder back.) The row is the
    sweeper's to retry under a new attempt: once its lease runs out (killed), or at its next period
    (failed)."""
    env = fault_env("rescan")
    (row,) = env.insert(1)
    env.dispatch_directly([row], attempt=1)
    gate, marker = env.tmp / "gate", env.tmp / "holder.marker"
    holder_env: dict[str, object] = {
        "DUECAST_TEST_GATE": gate,
        "DUECAST_TEST_GATE_AFTER_ROWS": 1,  # park after running the row, before the ack
        "DUECAST_TEST_BATCH_MARKER": marker,
    }
    if holder_fate == "handler_fails":
        holder_env["DUECAST_TEST_FAIL_IDS"] = row
    holder = env.worker("holder", allow=("InjectedError",), **holder_env)
    env.wait_listening(holder)
    env.push([Entry(row, 1)])
    env.wait_for(lambda: len(env.executions(holder.pid)) == 1, "the holder to run the row")

    copy = env.worker("copy", DUECAST_MYSQL__LOCK_WAIT_S=30, DUECAST_MYSQL__READ_TIMEOUT_S=60)
    env.wait_listening(copy)
    env.push([Entry(row, 1)])  # a copy while the holder is parked
    env.wait_for(lambda: env.stats().get("stale_entries", 0) == 1, "the copy to be found stale", timeout=10)

    if holder_fate == "killed":
        env.procs.kill(holder)
    else:
        gate.touch()  # the handler raises: no ack; the row's check counts as done, and failed
        env.wait_for(lambda: env.stats().get("failed", 0) == 1, "the holder to record the failure")
    env.push([Entry(row, 1)])  # and a copy after the holder's end
    env.wait_for(lambda: env.stats().get("stale_entries", 0) == 2, "the second copy to be found stale")
    assert env.executions(copy.pid) == [], "a copy ran the row again"
    env.procs.kill(holder)  # a retry must not meet the injected failure again
    # Whatever is left is the sweeper's: time passes in SQL, and it is redelivered under a new attempt.
    env.dispatcher()
    if holder_fate == "killed":
        assert env.rows() == {row: (RUNNING, 1)}
        env.back_date([row], seconds=env.source.lease_s + 1)  # its lease ran out
    else:
        assert env.rows() == {row: (IDLE, 1)}
        env.query(
            "UPDATE {t} SET due_at = due_at - INTERVAL %s SECOND", (env.source.period_s,)
        )  # a period on
    env.wait_for(lambda: not env.pending(), "the row to be run under a new attempt")

    verdict = env.verdict([row])
    assert not verdict.lost
    assert not verdict.duplicates, "one execution per (id, attempt)"
    assert verdict.attempts(row) == [1, 2]


@pytest.mark.parametrize("kind", KINDS)
def test_entry_of_an_older_attempt_never_runs_the_row(fault_env: Callable[..., FaultEnv], kind: str) -> None:
    """A row requeued and claimed again (attempt 2) while an entry of attempt 1 is still queued: that
    old entry is stale and is skipped; the attempt-2 entry runs the row, once."""
    env = fault_env(kind)
    (row,) = env.insert(1)
    env.dispatch_directly([row], attempt=2)
    worker = env.worker("worker")
    env.wait_listening(worker)

    env.push([Entry(row, 1)])
    env.wait_for(lambda: env.stats().get("popped", 0) == 1, "the worker to take the old entry")
    assert env.stats().get("stale_entries", 0) == 1
    assert env.executions() == []
    assert env.rows() == {row: (DISPATCHED, 2)}

    env.push([Entry(row, 2)])
    env.wait_for(lambda: not env.pending(), "the current entry to run the row")
    verdict = env.verdict([row])
    assert not verdict.lost
    assert verdict.attempts(row) == [2]
