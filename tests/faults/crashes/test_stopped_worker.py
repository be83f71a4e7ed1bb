"""(f) A stopped worker (SIGSTOP: a frozen VM, a debugger, a GC pause) holds no lock and no open
transaction, only leases it can no longer renew. Once they run out its rows go back and run
elsewhere under a new attempt; when it resumes, it self-fences and none of its late acks lands.
"""

from __future__ import annotations

import signal
from collections.abc import Callable

import pytest

from duecast.shared.states import State
from tests.faults.conftest import IDLE, SESSION_LOST, FaultEnv

pytestmark = pytest.mark.faults

RUNNING = int(State.RUNNING)
EXIT_FENCED = 69


def test_a_stopped_workers_rows_run_elsewhere_and_its_late_acks_never_land(
    fault_env: Callable[..., FaultEnv],
) -> None:
    env = fault_env("rescan")
    ids = env.insert(8)
    env.dispatcher()
    gate, marker = env.tmp / "gate", env.tmp / "stopped.marker"
    stopped = env.worker(
        "stopped", may_exit=True, allow=SESSION_LOST, DUECAST_TEST_GATE=gate, DUECAST_TEST_BATCH_MARKER=marker
    )
    batch = env.wait_batch(marker)
    assert batch.ids == set(ids)
    assert env.rows() == dict.fromkeys(ids, (RUNNING, 1))  # started: committed, not locked

    env.procs.signal(stopped, signal.SIGSTOP)
    # Its leases run out (time passes by back-dating their last renewal past lease_s).
    env.query("UPDATE {t} SET dc_dispatched_at = NOW(6) - INTERVAL 1 HOUR WHERE dc_state = %s", (RUNNING,))
    other = env.worker("other")
    env.wait_for(lambda: not env.pending(), "the stopped worker's rows to run elsewhere as attempt 2")
    assert env.column("checked_by_attempt") == dict.fromkeys(ids, 2)
    assert {e.id for e in env.executions(other.pid)} == set(ids)

    # It resumes and its handler returns: its acks are refused (counted stale), or, had its leases
    # gone unconfirmed for most of a lease by its own clock, it would leave (69) without acking.
    gate.touch()
    env.procs.signal(stopped, signal.SIGCONT)
    env.wait_for(
        lambda: not stopped.alive() or env.stats().get("stale_acks", 0) >= len(ids),
        "the resumed worker's late acks to be refused (or the worker to fence itself off)",
    )
    if not stopped.alive():
        assert env.procs.wait_exit(stopped, 5) == EXIT_FENCED
    assert env.column("checked_by_attempt") == dict.fromkeys(ids, 2)
    assert env.rows() == dict.fromkeys(ids, (IDLE, 2))
    verdict = env.verdict(ids)
    assert not verdict.lost
    assert not verdict.duplicates
