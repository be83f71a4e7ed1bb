"""Fleet-wide interruptions on real MariaDB (shared.blame_policy): runs of two workers whose leases
run out in one sweep are excused (not counted, never dead) even at their last interruption, and so
is the run of a worker that fenced itself; one worker's lone run at its last interruption is dead,
as before. A second worker process is a second store under another worker name."""

from __future__ import annotations

from typing import Any

import pytest

from duecast.shared.states import State
from duecast.shared.storage.leased.jobs import JobStore
from tests.integration.jobs.jobs_env import JobsEnv

pytestmark = pytest.mark.integration
CAP = 3
WHY = "interrupted: its worker process was killed by SIGKILL before finishing it"


@pytest.fixture
def blame_env(env: JobsEnv) -> JobsEnv:
    return env.with_jobs(max_interruptions=CAP)


def last_chance(env: JobsEnv, n: int) -> list[int]:
    """n jobs interrupted CAP - 1 times already: each runs alone next, and dies at one more."""
    ids = [env.enqueuer.enqueue("record", i) for i in range(n)]
    env.sql.execute(f"UPDATE `{env.table}` SET interruptions = %s", (CAP - 1,))
    return ids


def worker(env: JobsEnv, name: str) -> JobStore:
    store = env.store()
    store.worker = name  # another worker process's store: its runs record this name
    return store


def start_alone_and_die(store: JobStore, claimer: JobStore) -> Any:
    """Claim one run (one suspect job) and start it on `store`'s worker, which then dies (no ack,
    no renewal)."""
    (run,) = claimer.claim_due(1)
    store.start([run]).close()
    return run


def test_two_workers_runs_expiring_in_one_sweep_are_excused_even_at_their_last_interruption(
    blame_env: JobsEnv,
) -> None:
    a, b, sweeper = worker(blame_env, "host-a:1"), worker(blame_env, "host-b:2"), blame_env.store()
    jobs = last_chance(blame_env, 2)
    start_alone_and_die(a, sweeper)
    start_alone_and_die(b, sweeper)
    assert sorted(w for (w,) in blame_env.runs("worker")) == ["host-a:1", "host-b:2"]
    blame_env.expire_leases()  # MariaDB went away: every worker fenced, every lease ran out
    assert sweeper.requeue_interrupted(100) == 2
    for job in jobs:
        state, interruptions, error = blame_env.job(job, "dc_state", "interruptions", "last_error")
        assert (state, interruptions) == (State.IDLE, CAP - 1)  # pending again, not counted
        assert "not counted" in error
    assert blame_env.runs("id") == []


def test_one_workers_lone_run_expiring_alone_at_its_last_interruption_is_dead(blame_env: JobsEnv) -> None:
    a, sweeper = worker(blame_env, "host-a:1"), blame_env.store()
    (job,) = last_chance(blame_env, 1)
    start_alone_and_die(a, sweeper)
    blame_env.expire_leases()
    assert sweeper.requeue_interrupted(100) == 1
    assert blame_env.job(job, "dc_state", "interruptions") == (State.DEAD, CAP)


def test_one_workers_several_lone_runs_are_each_blamed(blame_env: JobsEnv) -> None:
    """One process's runs are one worker however many: its lone runs die (its batch's poison job
    cannot be told from the others by the sweep, and each ran alone)."""
    a, sweeper = worker(blame_env, "host-a:1"), blame_env.store()
    jobs = last_chance(blame_env, 2)
    start_alone_and_die(a, sweeper)
    start_alone_and_die(a, sweeper)
    blame_env.expire_leases()
    assert sweeper.requeue_interrupted(100) == 2
    assert [blame_env.job(j, "dc_state", "interruptions") for j in jobs] == [(State.DEAD, CAP)] * 2


@pytest.mark.parametrize(("fenced", "outcome"), [(True, (State.IDLE, CAP - 1)), (False, (State.DEAD, CAP))])
def test_a_worker_that_fenced_itself_is_excused_and_one_killed_is_blamed(
    blame_env: JobsEnv, fenced: bool, outcome: tuple[int, int]
) -> None:
    """Its supervisor's hand-back (worker/handback.py): an exit 69 (EXIT_FENCED, it lost MySQL)
    counts nothing; any other exit of a worker running a job alone is that job's last."""
    a, supervisor = worker(blame_env, "host-a:1"), blame_env.store()
    (job,) = last_chance(blame_env, 1)
    start_alone_and_die(a, supervisor)
    assert supervisor.interrupt_worker("host-a:1", WHY, fenced=fenced) == 1  # leases still running
    assert blame_env.job(job, "dc_state", "interruptions") == outcome
