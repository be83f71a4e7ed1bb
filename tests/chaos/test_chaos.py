"""The chaos suite, short versions (CI): real processes, signals, Redis and MariaDB restarts and
Sentinel failovers against one-off jobs (and, in the soak, re-scan sources and a cluster group
beside them, on a private MariaDB and a Sentinel-managed Redis), checked by tests/chaos/checker.py
and rescan_checker.py. Pass: nothing lost, nothing acked twice, nothing unexpected, every redundant
run explained by an injected fault. Each prints its seed; replay with DUECAST_CHAOS_SEED=<seed>.
The long version is `python -m tests.chaos.run` (docs/reliability.md).
"""

from __future__ import annotations

import os
import random
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path

import pymysql
import pytest

from duecast.cli.demo.fleet import cpu_seconds
from duecast.shared.settings import JOBS_SOURCE, MySQLSettings
from tests.chaos.app import RESCAN_RANGES, RESCAN_ROWS
from tests.chaos.claims import claims, claims_since, jobs_listed
from tests.chaos.faults import force_deadlock, kill_mysql_session
from tests.chaos.harness import Chaos
from tests.chaos.limits_checker import FLEET
from tests.chaos.private_mariadb import PrivateMariaDB, running_with
from tests.chaos.sentinel import SentinelRedis
from tests.chaos.soak import limits_verdicts, soak
from tests.faults.private_redis import PrivateRedis
from tests.faults.procs import Procs, wait_for

pytestmark = pytest.mark.faults
DOWN_S = float(os.environ.get("DUECAST_CHAOS_REDIS_DOWN_S", "6"))
# The soak's faults come in a row (a kill, then a read lock and a MariaDB restart seconds later), so
# one fault's "done within" includes the next ones' outages: 22 s worst on an idle machine, 33-47 s
# seen at load 5-8 from other suites on the 2 cores. Each fault alone is held to 20 s by its own
# test (docs/reliability.md's fault table); here the bound catches work stuck for good.
RECOVERY_BOUND_S = 45.0
# After a Redis failover, work flows again once this many more jobs are acked: more than the two
# workers hold (a pop of 100 each), so some of them were popped from the new master.
FLOWING = 500


def _acked(chaos: Chaos, target: int) -> bool:
    return chaos.acked() >= target


def assert_clean(chaos: Chaos) -> None:
    verdict = chaos.verdict()
    print(verdict.summary())
    assert not verdict.lost, f"lost {verdict.lost[:20]} (seed {chaos.seed})"
    assert not verdict.double_ack, f"acked twice {verdict.double_ack[:20]} (seed {chaos.seed})"
    assert not verdict.unexpected, f"{verdict.unexpected[:10]} (seed {chaos.seed})"


@pytest.fixture
def private_chaos(procs: Procs, tmp_path: Path) -> Iterator[tuple[Chaos, PrivateMariaDB]]:
    """A chaos run on a private MariaDB of its own, which the scenario may crash, restart and lock, and
    a Sentinel-managed Redis of its own, which it may fail over and restart."""
    seed = int(os.environ.get("DUECAST_CHAOS_SEED") or random.SystemRandom().randrange(1 << 31))
    redis = SentinelRedis(tmp_path)
    try:
        # The two start side by side (about 5 s and 4 s; the Sentinels need a few hello rounds to
        # know each other): CI runs close to its time limit.
        with ThreadPoolExecutor(1) as pool:
            topology = pool.submit(redis.start)
            with running_with(tmp_path, "duecast_chaos") as server:
                topology.result()
                run = Chaos(server.settings("duecast_chaos"), redis, procs, tmp_path, seed)
                try:
                    yield run, server
                finally:
                    procs.kill_all()
                    run.close()
    finally:
        redis.kill()


def test_soak_with_worker_kills_a_redis_failover_and_restarts_mariadb_faults_and_garbage_in_redis(
    private_chaos: tuple[Chaos, PrivateMariaDB],
) -> None:
    chaos, server = private_chaos
    took = soak(chaos, 20_000, server=server)
    assert chaos.group is not None
    print(
        f"soak: {len(chaos.healthy):,} jobs, {len(chaos.group.expected):,} messages in {took:.1f}s under ",
        end="",
    )
    print(f"{len(chaos.faults)} faults")
    assert {f.kind for f in chaos.faults} >= {
        "sigkill",
        "redis_restart",
        "sentinel_failover",
        "redis_flush",
        "redis_wrong_type",
        "dispatcher_killed_after_commit",
        "bad_hold",
        "mariadb_restart",
        "mariadb_read_lock",
        "sigstop_in_ack",
    }
    assert_clean(chaos)
    messages = chaos.message_verdict()
    print("cluster group:", messages.summary())
    assert not messages.lost, f"messages lost {messages.lost[:20]} (seed {chaos.seed})"
    assert not messages.double_ack, f"messages acked twice {messages.double_ack[:20]} (seed {chaos.seed})"
    assert not messages.unexpected, f"{messages.unexpected[:10]} (seed {chaos.seed})"
    # Every job and message a fault caught in a worker's hands is done within the bound after it.
    work = chaos.work_recovery()
    print("held work done after a fault within:", *work.lines(), sep="\n  ")
    killed = {source for kind, source in work.worst() if kind == "sigkill"}
    assert killed == {f"{JOBS_SOURCE}.default", chaos.group.source}, (
        f"killed holding {killed} (seed {chaos.seed})"
    )
    # bad_hold_handled_s: a corrupt hold quarantined and the other dead worker's taken, from the kills;
    # sentinel_failover_s: the Sentinels naming a new master that takes writes, from the fault.
    print("measured (s):", chaos.measured)
    slow_work = {k: s for k, s in work.worst().items() if s is None or s > RECOVERY_BOUND_S}
    assert not slow_work, (
        f"held work not done within {RECOVERY_BOUND_S}s after {slow_work} (seed {chaos.seed})"
    )
    verdict = chaos.rescan_verdict()
    print(verdict.summary())
    worst = verdict.worst_recovery()
    print("re-scan: every row checked again within (s), worst per fault:", worst)
    assert not verdict.lost, f"re-scan rows never checked again {verdict.lost[:20]} (seed {chaos.seed})"
    assert not verdict.double_ack, f"re-scan acked twice {verdict.double_ack[:20]} (seed {chaos.seed})"
    assert not verdict.unexpected, f"{verdict.unexpected[:10]} (seed {chaos.seed})"
    assert min(verdict.checks[RESCAN_ROWS], verdict.checks[RESCAN_RANGES]) > 0
    # Checks recover after every fault: each row is checked again within the bound after each one.
    slow = {kind: s for kind, s in worst.items() if s is None or s > RECOVERY_BOUND_S}
    assert not slow, f"re-scan did not recover within {RECOVERY_BOUND_S}s after {slow} (seed {chaos.seed})"
    assert_limits_held(chaos)
    # The ack record is the database's, not an assumption: a forged second ack shows up.
    assert chaos.rescan is not None
    row, attempt = chaos.query(
        f"SELECT id, dc_attempt FROM `{chaos.rescan.table}` WHERE dc_state = 0 LIMIT 1"
    )[0]
    chaos.query(f"UPDATE `{chaos.rescan.table}` SET checked_at = NOW(6) WHERE id = %s", (row,))
    assert chaos.rescan_verdict().double_ack == [(RESCAN_ROWS, row, attempt)]


def assert_limits_held(chaos: Chaos) -> None:
    """The soak's limits held through every fault, and bound: the row-mode source's claims in any
    window within what its bucket allows (limits_checker.RateLimit.bound), and the limited task's
    calls running at once within max_running_per_key for each key, counted from
    the handlers' own records."""
    assert chaos.rescan is not None
    assert chaos.limited is not None
    limit = chaos.rescan.rate
    rate, running = limits_verdicts(chaos)
    print(f"{RESCAN_ROWS}:", rate.summary(limit))
    assert not rate.over, f"{RESCAN_ROWS} over its rate limit: {rate.over} (seed {chaos.seed})"
    # It bound: its rows ask a third more than the rate, so its busiest 10 s took near what it allows.
    assert rate.windows[10.0][0] >= 0.8 * limit.rate_per_s * 10, f"the rate never bound: {rate.windows}"
    print("limited task:", running.summary())
    assert not running.over, f"limits exceeded {running.over}: {running.most} (seed {chaos.seed})"
    # It bound: each wave brings far more jobs of each key than max_running_per_key, and its calls
    # overlap.
    per_key = max(most for key, (most, _) in running.most.items() if key != FLEET)
    assert per_key == chaos.limited.per_key, f"max_running_per_key never bound: {running.most}"


def test_redis_down_the_dispatcher_stops_claiming_nothing_spins_and_all_recovers(chaos: Chaos) -> None:
    chaos.enqueue(4000)
    dispatcher = chaos.dispatcher("dispatcher")
    workers = [chaos.worker(f"worker-{i}") for i in range(2)]
    wait_for(lambda: chaos.acked() > 500, 60, "work to flow")
    chaos.fault("redis_down")
    chaos.redis.kill()
    time.sleep(1.0)  # in-flight ticks finish failing
    before = claims(chaos)
    cpu = {p.pid: cpu_seconds(p.pid) for p in [dispatcher, *workers]}
    time.sleep(DOWN_S)  # Redis stays down this long (the long version: 60 s)
    assert claims_since(chaos, before) == [], "claims while down"
    for p in [dispatcher, *workers]:
        used = cpu_seconds(p.pid) - cpu[p.pid]
        assert used < 0.25 * DOWN_S, f"pid {p.pid} used {used:.1f}s of CPU in {DOWN_S}s with Redis down"
    chaos.redis.start()  # empty: the dispatcher's canary notices and requeues what was dispatched
    chaos.wait_done(120)
    assert_clean(chaos)


def test_mysql_sessions_killed_again_and_again(chaos: Chaos) -> None:
    chaos.enqueue(4000)
    chaos.dispatcher("dispatcher")
    for i in range(2):
        chaos.worker(f"worker-{i}")
    kills = 0
    for _ in range(10):  # a wave of jobs, then a session killed while it is worked off
        target = chaos.acked() + 200
        chaos.enqueue(400)
        wait_for(partial(_acked, chaos, target), 60, "work to flow", chaos.procs.check)
        kills += kill_mysql_session(chaos)
    # And a deadlock forced on a worker starting a batch: it retries the unit. A try forms no cycle
    # when the worker's lock wait runs out first (a loaded machine), or the waiting batch locked
    # nothing before the rival's run (that try ends at once): a fresh wave, up to 8 tries (a try that
    # forms a cycle ends the loop, so more tries cost time only on a machine that needs them).
    deadlocked = False
    for _ in range(8):
        if deadlocked := force_deadlock(chaos, wave=1000):
            break
    chaos.wait_done(120)
    assert kills >= 8
    assert deadlocked, "no try closed a deadlock with a waiting worker"
    lines = [line for p in chaos.procs.procs.values() for line in p.log.read_text().splitlines()]
    assert any("retrying the start" in line and "(1213," in line for line in lines), "no unit retried"
    assert_clean(chaos)


def test_poison_jobs_that_raise_kill_or_hang_mixed_with_healthy_ones(chaos: Chaos) -> None:
    chaos.enqueue(3000, poison={"raise": 1, "die": 1, "hang": 1})
    chaos.dispatcher("dispatcher")
    for i in range(2):
        chaos.worker(f"worker-{i}")
    chaos.wait_done(120)
    assert_clean(chaos)
    rows = chaos.query(f"SELECT task, dc_state, errors, interruptions FROM `{chaos.table}` ORDER BY task")
    (die, hang, (task, state, errors, interruptions)) = rows
    assert die == ("die", 4, 0, 3)  # dead after 3 interruptions
    assert hang == (
        "hang",
        4,
        3,
        0,
    )  # given up at its timeout_s each run: dead after 3 failures (max_attempts)
    # Dead after 3 errors. Sharing a batch with the job that kills its worker may cost it an
    # interruption too (seed 366293757 puts them together), but never a third: that one dies alone.
    assert (task, state, errors) == ("raise", 4, 3)
    assert interruptions < 3


def test_three_dispatchers_and_the_leader_killed_again_and_again(chaos: Chaos) -> None:
    chaos.enqueue(3000)
    for i in range(3):
        chaos.dispatcher(f"dispatcher-{i}")
    for i in range(2):
        chaos.worker(f"worker-{i}")
    takeovers = []
    wait_for(lambda: chaos.leader() is not None, 20, "a first leader")
    for round_ in range(3):
        leader = chaos.leader()
        assert leader is not None
        chaos.fault("sigkill_leader", leader.pid)
        chaos.procs.kill(leader)
        killed_at = time.monotonic()
        chaos.dispatcher(f"dispatcher-r{round_}")  # the supervisor replaces it
        wait_for(lambda: chaos.leader() is not None, 20, f"a standby to take over (round {round_})")
        takeovers.append(time.monotonic() - killed_at)
    print("takeover after a leader kill (s):", ", ".join(f"{t:.1f}" for t in takeovers))
    # Leader lease 3 s (renewed every 1 s): a standby leads within the lease plus a renewal period.
    assert max(takeovers) < 3 * 2
    chaos.wait_done(120)
    assert_clean(chaos)


def test_all_workers_stopped_the_list_stays_bounded_then_everything_drains(chaos: Chaos) -> None:
    chaos.enqueue(5000)
    chaos.dispatcher("dispatcher", DUECAST_JOBS__HIGH_WATER="500", DUECAST_JOBS__CLAIM_BATCH="100")
    key = f"{{chaos-{chaos.table.split('_')[-1]}}}:ready:jobs.default"
    wait_for(lambda: chaos.redis.client.llen(key) > 0, 20, "the dispatcher to push")
    lengths = []
    for _ in range(10):
        time.sleep(0.8)  # sampling the list while no worker runs, past the visibility timeout
        lengths.append(jobs_listed(chaos, chaos.redis.client.lrange(key, 0, -1)))
    # High water plus at most one claim batch, in jobs (what both count): the list's entries are runs.
    assert max(lengths) <= 500 + 100
    for i in range(2):
        chaos.worker(f"worker-{i}")
    chaos.wait_done(120)
    assert_clean(chaos)


def test_mariadb_restarted_twice_while_jobs_flow(
    mysql_settings: MySQLSettings, private_redis: PrivateRedis, procs: Procs, tmp_path: Path
) -> None:
    server = PrivateMariaDB(tmp_path)
    server.start()
    admin = pymysql.connect(host="127.0.0.1", port=server.port, user="root")
    with admin.cursor() as cur:
        cur.execute("CREATE DATABASE duecast_chaos CHARACTER SET utf8mb4")
    admin.close()
    seed = int(os.environ.get("DUECAST_CHAOS_SEED") or random.SystemRandom().randrange(1 << 31))
    chaos = Chaos(server.settings("duecast_chaos"), private_redis, procs, tmp_path, seed)
    try:
        chaos.dispatcher("dispatcher")
        for i in range(2):
            chaos.worker(f"worker-{i}")
        for _ in range(2):
            target = chaos.acked() + 500
            chaos.enqueue(1500)
            wait_for(partial(_acked, chaos, target), 60, "work to flow", procs.check)
            chaos.fault("mariadb_restart")
            server.restart()  # SIGKILL: a crash, then InnoDB recovery on start
            chaos.reconnect()
        chaos.wait_done(120)
        for proc in [*chaos.workers.values(), *chaos.dispatchers.values()]:
            assert proc.alive(), f"{proc.name} exited on a database restart"
        assert_clean(chaos)
    finally:
        procs.kill_all()
        server.kill()


def test_sentinel_failovers_and_a_master_killed_while_jobs_flow(
    mysql_settings: MySQLSettings, procs: Procs, tmp_path: Path
) -> None:
    """Issue 24: jobs through a Sentinel-managed Redis (a master, a replica, three Sentinels), failed
    over by SENTINEL FAILOVER there and back, then its master SIGKILLed (the replica promoted)."""
    server = SentinelRedis(tmp_path)
    seed = int(os.environ.get("DUECAST_CHAOS_SEED") or random.SystemRandom().randrange(1 << 31))
    try:
        server.start()
        chaos = Chaos(mysql_settings, server, procs, tmp_path, seed)
        try:
            chaos.dispatcher("dispatcher")
            for i in range(2):
                chaos.worker(f"worker-{i}")
            flowing = []
            faults = [
                ("sentinel_failover", server.failover),
                ("sentinel_failover", server.failover),  # and back
                ("sentinel_master_killed", server.kill_master),
            ]
            for kind, fault in faults:
                target = chaos.acked() + 300
                chaos.enqueue(1500)
                wait_for(partial(_acked, chaos, target), 60, "work to flow", procs.check)
                chaos.fault(kind)
                at, acked = time.monotonic(), chaos.acked()
                fault()
                wait_for(partial(_acked, chaos, acked + FLOWING), 60, f"work after {kind}", procs.check)
                flowing.append(f"{time.monotonic() - at:.1f}")
            print(f"{FLOWING} more jobs acked after each fault within (s):", ", ".join(flowing))
            chaos.wait_done(120)
            assert_clean(chaos)
        finally:
            procs.kill_all()
            chaos.close()
    finally:
        server.kill()
