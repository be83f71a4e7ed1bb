"""Scenario 1, the soak: one-off jobs and a cluster group's messages in waves, with re-scan sources
beside them, a fault per wave. The CI test (test_chaos.py) and the long runner (run.py) both run
this, on a Sentinel-managed Redis (tests/chaos/sentinel.py) and a private MariaDB; the checkers
judge the outcome, and each fault's recovery is measured (checker.WorkRecovery, rescan_checker).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any

from duecast.shared.settings import JOBS_SOURCE
from tests.chaos.app import RESCAN_RANGES, RESCAN_ROWS
from tests.chaos.faults import (
    JOBS,
    all_acked,
    backlog,
    corrupt_a_dead_workers_hold,
    fail_redis_over,
    hold_read_lock,
    holder,
    keys,
    kill_holder,
    restart_mariadb,
    resume,
    stop_in_ack,
    stop_worker,
)
from tests.chaos.harness import Chaos
from tests.chaos.limits_checker import RateVerdict, RunningVerdict
from tests.chaos.private_mariadb import PrivateMariaDB
from tests.chaos.sentinel import SentinelRedis
from tests.faults.conftest import CRASH_AFTER_COMMIT
from tests.faults.procs import Proc, wait_for

# Once the faults are over, every re-scan row must be checked again within this long (a healthy
# check comes every period plus a claim, 5-6 s; a row a killed or stopped worker had started waits out
# its lease first, one it had only popped its silence or the visibility timeout). Only a failing run
# waits it out.
RESCAN_BOUND_S = 60.0
# A dead worker is found after 2 s (its hold requeued at once), well before the 5 s visibility
# timeout: so the leader's look at dead workers' holds (issue 16.2) is what brings their rows back.
FAST_DEATH = {"DUECAST_WORKER__HEARTBEAT_S": "0.5", "DUECAST_WORKER__DEAD_AFTER_S": "2"}
SETTLE_S = 120.0
# Each wave brings this many jobs of the limited task (tests/chaos/limited.py) at once: far more
# per key than its max_running_per_key, so the limit binds in every wave; at keys x per_key /
# LIMITED_CALL_S calls per second they are done well within the wave.
LIMITED_PER_WAVE = 40


@dataclass(frozen=True)
class Plan:
    """How many of each fault the soak injects (the rest of its waves are worker SIGKILLs, aimed in
    turn at a worker holding jobs, re-scan rows and the group's messages), and how long the server
    faults last."""

    # 12 fixed faults and 4 kills (jobs twice: on a loaded machine one kill may find no worker
    # holding jobs, and the CI test wants one that did)
    waves: int = 16
    flushes: int = 1
    redis_restarts: int = 2  # on the Sentinel topology: its master restarted in place, empty
    failovers: int = 1  # SENTINEL FAILOVER while work flows (24.10); needs the Sentinel topology
    wrong_types: int = 1
    group_kills: int = 1  # SIGKILL a worker holding a batch of the cluster group
    bad_holds: int = 1  # two workers SIGKILLed, one's hold record overwritten with 0xff bytes
    mariadb_restarts: int = 1  # needs the soak's private MariaDB
    read_locks: int = 1  # FLUSH TABLES WITH READ LOCK, held read_lock_s; needs it too
    ack_stops: int = 1  # SIGSTOP a worker inside its ack transaction, resumed past the lease (24.1)
    mariadb_down_s: float = 2.0
    read_lock_s: float = 4.0  # past the 3 s job lease: workers holding batches fence themselves
    # Each fault waits until the work the last one caught is done (at most SETTLE_S), so that each
    # recovery is measured alone; otherwise faults come in a row, a wave apart (the harder test).
    settle: bool = False
    fast_death: bool = True  # FAST_DEATH; False: worker.heartbeat_s and dead_after_s as by default

    @property
    def hold_handled_s(self) -> float:
        return 10.0 if self.fast_death else 30.0  # dead_after_s (2 s or 15 s) plus a look or two

    def steps(self, server: bool, sentinel: bool) -> list[str]:
        """`server`: the run's database is a private MariaDB; `sentinel`: its Redis a SentinelRedis."""
        plan = ["flush"] * self.flushes + ["redis_restart"] * self.redis_restarts + ["stop", "stop_rescan"]
        if sentinel:
            plan += ["failover"] * self.failovers
        plan += ["wrong_type"] * self.wrong_types + ["kill_group"] * self.group_kills
        plan += ["bad_hold"] * self.bad_holds + ["stop_in_ack"] * self.ack_stops
        if server:
            plan += ["mariadb_restart"] * self.mariadb_restarts + ["read_lock"] * self.read_locks
        fixed = len(plan)
        plan += ["kill", "kill_rescan", "kill_group"] * max(0, self.waves - fixed)
        return plan[: max(self.waves, fixed)]


def _flowing(chaos: Chaos, target: int) -> bool:
    return chaos.supervise() and chaos.acked() >= target


def _after(deadline: float) -> bool:
    return time.monotonic() > deadline


def _settled(chaos: Chaos, done: set[int]) -> bool:
    """Every job and message the faults so far caught in workers' hands has been acked (`done`: the
    indexes of holdings found so, not read again)."""
    chaos.supervise()
    for i, holding in enumerate(chaos.holdings):
        if i not in done:
            if not all_acked(chaos, holding):
                return False
            done.add(i)
    return True


def _recovered(chaos: Chaos, done: set[int], units: int) -> bool:
    """`_settled`, and every re-scan row (`units`: rows and spans) checked since the last fault."""
    assert chaos.rescan is not None
    last = max(f.at for f in chaos.faults)
    return _settled(chaos, done) and chaos.rescan.covered_since(last) >= units


def soak(
    chaos: Chaos,
    jobs: int,
    plan: Plan | None = None,
    *,
    rescan: Mapping[str, Any] | None = None,
    server: PrivateMariaDB | None = None,
) -> float:
    """One-off jobs and a cluster group's messages (a quarter as many) enqueued in waves, with each
    wave LIMITED_PER_WAVE jobs of a task under a per-key limit, and a row-mode (under a rate limit that
    binds) and a range-mode re-scan source (`rescan`: their sizes, see RescanTables) served by the
    same dispatcher all along, under the faults of `plan`: worker SIGKILLs (aimed at workers holding
    jobs, re-scan rows or the group's messages), Redis restarts and a FLUSHALL, a ready list SET to
    a string (issue 16.3), a dead worker's hold record made garbage (16.2), a dispatcher SIGKILLed
    right after a COMMIT, two workers SIGSTOPped past the lease then resumed, one SIGSTOPped inside its
    ack transaction (its row locks held until the server ends the idle session), with `server` (the
    private MariaDB the run's database lives on) a MariaDB crash and restart and a read lock, and with
    a SentinelRedis as `chaos.redis` a SENTINEL FAILOVER (its Redis restarts restart the master). Returns
    the seconds until every job and message is acked; then waits for every re-scan row to be checked
    again and stops every process."""
    plan = plan or Plan()
    per_wave = max(1, jobs // plan.waves)
    units = chaos.add_rescan(**(rescan or {})).units()  # re-scan rows and spans
    group = chaos.add_group()
    chaos.add_limited()
    if plan.fast_death:
        chaos.env.update(FAST_DEATH)
    chaos.enqueue(per_wave)
    chaos.enqueue(LIMITED_PER_WAVE, limited=True)
    group.publish(chaos.settings, per_wave // 4)
    first = chaos.dispatcher("dispatcher-crash", CRASH_AFTER_COMMIT)
    chaos.procs.wait_exit(first, 60)
    chaos.fault("dispatcher_killed_after_commit", first.pid)
    chaos.dispatcher("dispatcher")
    # Re-scan first: a worker pops the first non-empty list it serves, and the jobs list is never
    # empty here. Every worker serves all four; each list is popped by its own count.
    for i in range(4):
        chaos.worker(f"worker-{i}", (RESCAN_ROWS, RESCAN_RANGES, group.source, JOBS_SOURCE))
    started = time.monotonic()
    steps = plan.steps(server is not None, isinstance(chaos.redis, SentinelRedis))
    chaos.rng.shuffle(steps)
    stopped: list[tuple[Proc, float]] = []
    settled: set[int] = set()
    for step in steps:
        target = chaos.acked() + per_wave // 2
        chaos.enqueue(per_wave)
        chaos.enqueue(LIMITED_PER_WAVE, limited=True)
        group.publish(chaos.settings, per_wave // 4)
        # The next fault lands once half a wave has been worked off: faults meet work in flight.
        wait_for(partial(_flowing, chaos, target), 300, "work to flow", chaos.procs.check)
        for proc, until in [s for s in stopped if time.monotonic() > s[1]]:
            resume(chaos, proc)
            stopped.remove((proc, until))
        if plan.settle:
            wait_for(
                partial(_settled, chaos, settled),
                SETTLE_S,
                "the work the last fault caught",
                chaos.procs.check,
            )
        if step == "failover":
            # Measured alone: the roles stay on the old master until the Sentinels demote it (they
            # wait 8-10 s after switching), what was pushed there then comes back by its visibility
            # timeout, and folded into the recovery of the faults before it, that would be counted
            # against them (each must recover within 30 s in CI).
            wait_for(
                partial(_recovered, chaos, settled, units),
                SETTLE_S,
                "every re-scan row checked and the work caught done since the last fault",
                chaos.procs.check,
            )
        _inject(chaos, step, stopped, plan, server)
    for proc, until in stopped:
        wait_for(partial(_after, until), 60, "a stopped worker's lease to pass")
        resume(chaos, proc)
    chaos.faults_end = chaos.db_now()
    chaos.wait_done(max(300, jobs / 200))
    took = time.monotonic() - started
    chaos.wait_rescanned(RESCAN_BOUND_S)
    chaos.stop_all()
    return took


def limits_verdicts(chaos: Chaos) -> tuple[RateVerdict, RunningVerdict]:
    """The row-mode source's rate and the limited task's max_running_per_key (tests/chaos/limits_checker.py),
    from the records of a soak whose processes have all stopped. A pop batch may wait in each
    worker's hands: the four the soak keeps alive, and those it stopped."""
    assert chaos.rescan is not None
    assert chaos.limited is not None
    stopped = sum(1 for f in chaos.faults if f.kind in ("sigstop", "sigstop_in_ack"))
    rate = chaos.rescan.rate_verdict(chaos.rescan_log, chaos.pop_batch * (len(chaos.workers) + stopped))
    return rate, chaos.limited.verdict(chaos.faults)


def _inject(
    chaos: Chaos, step: str, stopped: list[tuple[Proc, float]], plan: Plan, server: PrivateMariaDB | None
) -> None:
    rescans = (RESCAN_ROWS, RESCAN_RANGES)
    if step == "flush":
        chaos.fault("redis_flush")
        chaos.redis.client.flushall()
    elif step == "redis_restart":
        chaos.fault("redis_restart")
        chaos.redis.restart()
    elif step == "failover":
        fail_redis_over(chaos)
    elif step == "wrong_type":
        # A stray SET over the row-mode source's ready list (its entries with it): the first role to
        # meet the WRONGTYPE moves it aside, and the dispatcher requeues what the list held.
        chaos.fault("redis_wrong_type")
        chaos.redis.client.set(keys(chaos).ready(RESCAN_ROWS), b"not a list")
    elif step in ("stop", "stop_rescan"):
        proc = stop_worker(chaos, holder(chaos, rescans) if step == "stop_rescan" else None)
        stopped.append((proc, time.monotonic() + chaos.lease_s * 2))
    elif step == "stop_in_ack":
        backlog(chaos)
        caught_in_ack = stop_in_ack(chaos)
        if caught_in_ack is not None:
            stopped.append((caught_in_ack, time.monotonic() + chaos.lease_s * 2))
    elif step == "bad_hold":
        corrupt_a_dead_workers_hold(chaos, plan.hold_handled_s)
    elif step == "mariadb_restart":
        assert server is not None
        restart_mariadb(chaos, server, plan.mariadb_down_s)
    elif step == "read_lock":
        hold_read_lock(chaos, plan.read_lock_s)
    else:
        assert chaos.group is not None
        if step != "kill_rescan":  # a backlog, so that a worker is caught with a batch of it
            backlog(chaos, step == "kill_group")
        aim = {"kill": (JOBS,), "kill_rescan": rescans, "kill_group": (chaos.group.source,)}[step]
        kill_holder(chaos, aim)
