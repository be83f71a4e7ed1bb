"""Scenario 1, the soak: one-off jobs in waves with re-scan sources beside them, a fault per wave. The
CI test (test_chaos.py) and the long runner (run.py) both run this; the checkers judge the outcome.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from functools import partial
from typing import Any

from duecast.shared.fanout.keys import Keys
from duecast.shared.settings import JOBS_SOURCE
from tests.chaos.app import RESCAN_RANGES, RESCAN_ROWS
from tests.chaos.harness import Chaos
from tests.faults.conftest import CRASH_AFTER_COMMIT
from tests.faults.procs import Proc, wait_for

# Once the faults are over, every re-scan row must be checked again within this long (a healthy
# check comes every period plus a claim, 5-6 s; a row a killed or stopped worker had started waits out
# its lease first, one it had only popped its silence or the visibility timeout). Only a failing run
# waits it out.
RESCAN_BOUND_S = 60.0


def _flowing(chaos: Chaos, target: int) -> bool:
    return chaos.supervise() and chaos.acked() >= target


def _after(deadline: float) -> bool:
    return time.monotonic() > deadline


def rescan_holder(chaos: Chaos, timeout_s: float = 5.0) -> Proc | None:
    """A live worker in the middle of a re-scan batch, found by the hold record every worker keeps
    in Redis while it works a batch (the one the reaper reads); None if none is seen in time."""
    assert chaos.rescan is not None
    names = {s.name.encode() for s in chaos.rescan.sources}
    pattern = Keys(f"chaos-{chaos.suffix}").inflight("*")
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        live = {p.pid: p for p in chaos.live_workers()}
        for key in chaos.redis.client.scan_iter(match=pattern):
            held = chaos.redis.client.get(key)
            source = held.split(b"\n", 1)[0] if isinstance(held, bytes) else b""
            pid = int(key.rsplit(b":", 1)[1])  # the worker's name is host:pid
            if source in names and pid in live:
                return live[pid]
        time.sleep(0.01)
    return None


def soak(
    chaos: Chaos,
    jobs: int,
    *,
    waves: int = 10,
    flushes: int = 1,
    redis_restarts: int = 2,
    rescan: Mapping[str, Any] | None = None,
    wrong_types: int = 1,
) -> float:
    """One-off jobs enqueued in waves, and a row-mode and a range-mode re-scan source (`rescan`:
    their sizes, see RescanTables) served by the same dispatcher all along, under worker SIGKILLs
    (every other one aimed at a worker in a re-scan batch), Redis restarts and a FLUSHALL, a ready
    list SET to a string (issue 16.3), one dispatcher SIGKILLed right after a COMMIT, and two workers
    SIGSTOPped past the job lease then resumed (one at random, one in a re-scan batch). Returns the
    seconds until every job is acked; then waits for every re-scan row to be checked again and stops
    every process."""
    per_wave = max(1, jobs // waves)
    chaos.add_rescan(**(rescan or {}))
    chaos.enqueue(per_wave)
    first = chaos.dispatcher("dispatcher-crash", CRASH_AFTER_COMMIT)
    chaos.procs.wait_exit(first, 60)
    chaos.fault("dispatcher_killed_after_commit", first.pid)
    chaos.dispatcher("dispatcher")
    # Re-scan first: a worker pops the first non-empty list it serves, and the jobs list is never
    # empty here. Every worker serves all three; each list is popped by its own count.
    for i in range(4):
        chaos.worker(f"worker-{i}", (RESCAN_ROWS, RESCAN_RANGES, JOBS_SOURCE))
    started = time.monotonic()
    plan = ["flush"] * flushes + ["redis_restart"] * redis_restarts + ["stop", "stop_rescan"]
    plan += ["wrong_type"] * wrong_types
    fixed = len(plan)
    plan += ["kill", "kill_rescan"] * max(0, waves - len(plan))
    plan = plan[: max(waves, fixed)]
    chaos.rng.shuffle(plan)
    stopped: list[tuple[Proc, float]] = []
    for step in plan:
        target = chaos.acked() + per_wave // 2
        chaos.enqueue(per_wave)
        # The next fault lands once half a wave has been worked off: faults meet work in flight.
        wait_for(partial(_flowing, chaos, target), 300, "work to flow", chaos.procs.check)
        for proc, until in [s for s in stopped if time.monotonic() > s[1]]:
            chaos.resume(proc)
            stopped.remove((proc, until))
        _inject(chaos, step, stopped)
    for proc, until in stopped:
        wait_for(partial(_after, until), 60, "a stopped worker's lease to pass")
        chaos.resume(proc)
    chaos.faults_end = chaos.db_now()
    chaos.wait_done(max(300, jobs / 200))
    took = time.monotonic() - started
    chaos.wait_rescanned(RESCAN_BOUND_S)
    chaos.stop_all()
    return took


def _inject(chaos: Chaos, step: str, stopped: list[tuple[Proc, float]]) -> None:
    if step == "flush":
        chaos.fault("redis_flush")
        chaos.redis.client.flushall()
    elif step == "redis_restart":
        chaos.fault("redis_restart")
        chaos.redis.restart()
    elif step == "wrong_type":
        # A stray SET over the row-mode source's ready list (its entries with it): the first role to
        # meet the WRONGTYPE moves it aside, and the dispatcher requeues what the list held.
        chaos.fault("redis_wrong_type")
        chaos.redis.client.set(Keys(f"chaos-{chaos.suffix}").ready(RESCAN_ROWS), b"not a list")
    elif step in ("stop", "stop_rescan"):
        proc = chaos.stop_worker_past_lease(rescan_holder(chaos) if step == "stop_rescan" else None)
        stopped.append((proc, time.monotonic() + chaos.lease_s * 2))
    else:
        chaos.kill_random_worker(rescan_holder(chaos) if step == "kill_rescan" else None)
