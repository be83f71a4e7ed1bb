"""MySQL sessions lost between units of work (server restart, failover, wait_timeout, a DBA's KILL):
each role must carry on with a fresh connection, and no work may wait out a visibility timeout
for it (shared/storage/db.py: "the caller retries the whole unit").
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.faults.conftest import SESSION_LOST, FaultEnv
from tests.faults.procs import Proc

pytestmark = pytest.mark.faults

RECOVERY_S = 10.0  # far below the 30 s visibility timeout: recovering in time means not by the sweeper


def _kill_sessions(env: FaultEnv, proc: Proc) -> None:
    sessions = env.mysql_sessions(proc)
    assert sessions, f"{proc.name} has no MySQL session"
    for session in sessions:
        env.query(f"KILL {session}")
    env.wait_for(lambda: not any(env.session_alive(s) for s in sessions), f"{proc.name}'s sessions to go")


def test_worker_whose_idle_session_was_killed_runs_its_next_batch(fault_env: Callable[..., FaultEnv]) -> None:
    env = fault_env("rescan")
    first = env.insert(3)
    env.dispatcher()
    worker = env.worker("worker", allow=SESSION_LOST)
    env.wait_for(lambda: not env.pending(), "the first rows to be run")

    _kill_sessions(env, worker)  # the worker is idle, blocked in BLMPOP
    more = env.insert(5, start=100)
    env.wait_for(
        lambda: not env.pending(), "the worker to run the next batch on a fresh session", timeout=RECOVERY_S
    )
    verdict = env.verdict([*first, *more])
    assert not verdict.lost
    assert not verdict.duplicates
    assert not verdict.redundant
    assert worker.alive()


def test_dispatcher_whose_sessions_were_killed_keeps_dispatching(fault_env: Callable[..., FaultEnv]) -> None:
    env = fault_env("rescan")
    first = env.insert(3)
    dispatcher = env.dispatcher(allow=SESSION_LOST)
    env.worker("worker")
    env.wait_for(lambda: not env.pending(), "the first rows to be run")

    _kill_sessions(env, dispatcher)  # the claim loop's and the sweeper's
    more = env.insert(5, start=100)
    env.wait_for(lambda: not env.pending(), "the dispatcher to claim on a fresh session", timeout=RECOVERY_S)
    verdict = env.verdict([*first, *more])
    assert not verdict.lost
    assert not verdict.duplicates
    assert not verdict.redundant
    assert dispatcher.alive()
