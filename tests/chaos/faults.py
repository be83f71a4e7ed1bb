"""The faults the chaos scenarios inject, and what each one caught in workers' hands: worker kills
and stops, a dead worker's hold record made garbage, the MariaDB server crashed and restarted or
read-locked, a Sentinel failover of Redis, a MySQL session killed, and a real InnoDB deadlock with a
worker starting its batch.

The deadlock: a rival session writes ballast rows first (InnoDB rolls back the transaction that
changed fewer rows, so the worker is the victim), locks the newest dispatched job run (that row
alone, by its primary key), waits until a worker's start waits for that row (INNODB_LOCK_WAITS), and
asks for the first run of the waiting worker's batch, which the worker locked before (ids are locked
in order): a cycle. The worker must retry its unit.

A job is dispatched, started and leased as a member of a run (shared/queries/job_runs.py): a
worker's hold names runs, which `held_by` reads as the jobs they still hold.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import time
import uuid
from collections.abc import Collection

import pymysql

from duecast.shared.entries import BadEntry, BadHold, decode_entry
from duecast.shared.fanout.keys import Keys
from duecast.shared.fanout.protocol import NO_SOURCE
from duecast.shared.fanout.queue import ReadyQueue
from duecast.shared.settings import JOBS_SOURCE
from duecast.shared.states import State
from duecast.shared.storage.db import connect
from duecast.shared.storage.leased.members import decode_members
from tests.chaos.checker import Fault, Holding
from tests.chaos.harness import Chaos
from tests.chaos.private_mariadb import PrivateMariaDB
from tests.chaos.sentinel import SentinelRedis
from tests.faults.procs import Proc, wait_for

JOBS = f"{JOBS_SOURCE}.default"
_START = "`dc_attempt`, `suspects`, `members`"  # what a worker's start locks (queries/job_runs.py)
# A fence's groups, `(`id` IN (1,2) AND `dc_attempt` = 3)`; a group cut short by INNODB_TRX's
# truncated statement text does not match, so a half-read list is never taken for the whole.
_GROUPS = re.compile(r"`id` IN \(([\d,]+)\) AND `dc_attempt` = (\d+)")
_LATEST_DEADLOCK = re.compile(r"LATEST DETECTED DEADLOCK\n-+\n(.*?)\n-{10,}\n", re.S)
_THREAD = re.compile(r"(?:MySQL|MariaDB) thread id (\d+),")
_VICTIM = re.compile(r"WE ROLL BACK TRANSACTION \((\d)\)")
POLL_S = 0.2  # MariaDB refreshes its INNODB_* tables only when they were not read for 100 ms
# The runs table is read as any table: polled often, since a fast machine works a wave of 1,000 jobs
# off in well under POLL_S, and a try whose polls all fall outside the wave finds no run to hold
# (every try of one CI run on a fast day: no cycle in 8).
HELD_POLL_S = 0.005


def force_deadlock(chaos: Chaos, wave: int = 1000, timeout_s: float = 10.0) -> bool:
    """Enqueue a wave of `wave` jobs and close a cycle with a worker starting a batch of it: True
    when InnoDB's own report says it rolled the worker back. Not every try does: on a loaded machine
    the worker's lock wait (mysql.lock_wait_s) can run out before the rival asks for its row, and a
    batch may hold nothing before the rival's run."""
    ballast = f"chaos_ballast_{uuid.uuid4().hex[:8]}"
    chaos.query(f"CREATE TABLE `{ballast}` (id INT AUTO_INCREMENT PRIMARY KEY, pad CHAR(8) NOT NULL)")
    conn = connect(chaos.mysql)
    try:
        with conn.cursor() as cur:
            cur.execute(f"INSERT INTO `{ballast}` (pad) SELECT 'x' FROM seq_1_to_1000")
            # Only a run of this wave: one left DISPATCHED by an earlier fault (its start skipped it
            # after a lock wait; the sweeper takes it only once its visibility timeout is past, and
            # skips it while the rival holds it) would be the newest each try, with no start to come.
            ((floor,),) = chaos.query(f"SELECT COALESCE(MAX(id), 0) FROM `{runs_table(chaos)}`")
            chaos.enqueue(wave)
            deadline = time.monotonic() + timeout_s
            held = None
            while held is None and time.monotonic() < deadline:  # until the dispatcher claims the wave
                held = _lock_newest_dispatched(chaos, cur, int(floor))
                if held is None:
                    time.sleep(HELD_POLL_S)
            if held is None:
                return False
            cur.execute(
                "SELECT trx_id FROM information_schema.INNODB_TRX WHERE trx_mysql_thread_id = CONNECTION_ID()"
            )
            (trx,) = cur.fetchone() or (None,)
            first = _first_of_waiting_batch(chaos, trx, held, deadline)
            if first is None:
                return False
            chaos.fault("mysql_deadlock")
            try:
                cur.execute(f"SELECT id FROM `{runs_table(chaos)}` WHERE id = %s FOR UPDATE", (first,))
            except pymysql.err.OperationalError:  # the rival lost after all (or waited too long)
                return False
            return _rival_won_deadlock(cur)
    finally:
        conn.rollback()
        conn.close()
        chaos.query(f"DROP TABLE IF EXISTS `{ballast}`")


def _lock_newest_dispatched(chaos: Chaos, cur: pymysql.cursors.Cursor, floor: int) -> int | None:
    """Lock the newest DISPATCHED run above `floor`, that row alone: found by a plain read, then
    locked by its primary key, so the rival holds exactly the row it names (a locking read that sorts
    the small runs table may lock rows it does not return)."""
    cur.execute(
        f"SELECT id FROM `{runs_table(chaos)}` WHERE dc_state = %s AND id > %s ORDER BY id DESC LIMIT 1",
        (int(State.DISPATCHED), floor),
    )
    newest = cur.fetchone()
    if newest is None:
        return None
    cur.execute(  # a worker's start may have taken it since: skipped, or (RUNNING) not matched
        f"SELECT id FROM `{runs_table(chaos)}` WHERE id = %s AND dc_state = %s FOR UPDATE SKIP LOCKED",
        (int(newest[0]), int(State.DISPATCHED)),
    )
    held = cur.fetchone()
    return None if held is None else int(held[0])


def _first_locked(chaos: Chaos, query: str, held: int) -> int | None:
    """The lowest run id a waiting start statement has locked: it locks in id order, and under
    READ COMMITTED keeps only rows its fence matches (still DISPATCHED under the attempt it names)."""
    fence = [(int(attempt), int(i)) for ids, attempt in _GROUPS.findall(query) for i in ids.split(",")]
    candidates = [(a, i) for a, i in fence if i < held]
    if not candidates:
        return None
    rows = chaos.query(
        f"SELECT id, dc_attempt FROM `{runs_table(chaos)}` WHERE dc_state = %s AND id IN "
        f"({','.join(str(i) for _, i in candidates)})",
        (int(State.DISPATCHED),),
    )
    matching = sorted(i for i, a in rows if (int(a), int(i)) in set(candidates))
    return matching[0] if matching else None


def _rival_won_deadlock(cur: pymysql.cursors.Cursor) -> bool:
    """Whether InnoDB's latest detected deadlock is this session's and rolled back the other side."""
    cur.execute("SELECT CONNECTION_ID()")
    (me,) = cur.fetchone() or (0,)
    cur.execute("SHOW ENGINE INNODB STATUS")
    (_, _, status) = cur.fetchone() or ("", "", "")
    found = _LATEST_DEADLOCK.search(str(status))
    if found is None:
        return False
    report = found.group(1)
    victim = _VICTIM.search(report)
    threads = [int(t) for t in _THREAD.findall(report)]
    if victim is None or me not in threads or len(threads) < 2:
        return False
    # InnoDB numbers the two transactions (1) and (2) in order; the victim is the other one.
    return threads[int(victim.group(1)) - 1] != me


def _first_of_waiting_batch(chaos: Chaos, trx: object, held: int, deadline: float) -> int | None:
    """The first run id in the start statement of a worker waiting for the rival's lock (`held`):
    one the worker already locked. None when the deadline passes, or at once when the waiting start
    can close no cycle: a batch of the held run alone, or one whose runs are all newer than it (a
    wave dispatched run by run, the rival in between): the worker locked nothing the rival could ask
    for, and waiting out its lock wait would only cost the try its time."""
    while time.monotonic() < deadline:
        rows = chaos.query(
            "SELECT r.trx_query FROM information_schema.INNODB_LOCK_WAITS w "
            "JOIN information_schema.INNODB_TRX r ON r.trx_id = w.requesting_trx_id "
            "WHERE w.blocking_trx_id = %s",
            (trx,),
        )
        starts = [str(query or "") for (query,) in rows if _START in str(query or "")]
        for query in starts:  # a finish waiting for it is not what is tested here
            first = _first_locked(chaos, query, held)
            if first is not None:
                return first
        if any(_fence_ids(query) and min(_fence_ids(query)) >= held for query in starts):
            return None
        time.sleep(POLL_S)
    return None


def _fence_ids(query: str) -> list[int]:
    """The run ids a start statement's fence names (none when its text was cut short)."""
    return [int(i) for ids, _ in _GROUPS.findall(query) for i in ids.split(",")]


def kill_mysql_session(chaos: Chaos) -> bool:
    """KILL one MySQL session of a random live duecast process (found by its TCP client ports)."""
    from tests.faults.procs import tcp_peers  # noqa: PLC0415 - Linux /proc, the fault tier's helper

    procs = [p for p in [*chaos.workers.values(), *chaos.dispatchers.values()] if p.alive()]
    chaos.rng.shuffle(procs)
    rows = chaos.query(
        "SELECT ID, HOST FROM information_schema.PROCESSLIST WHERE DB = %s", (chaos.mysql.database,)
    )
    for proc in procs:
        ports = {str(local) for local, remote in tcp_peers(proc.pid) if remote == chaos.mysql.port}
        ids = [int(i) for i, host in rows if str(host).rsplit(":", 1)[-1] in ports]
        if ids:
            chaos.fault("mysql_kill", proc.pid)
            with contextlib.suppress(pymysql.err.OperationalError):  # it may have ended meanwhile
                chaos.query(f"KILL CONNECTION {chaos.rng.choice(ids)}")
            return True
    return False


# ---------------------------------------------------------------- worker faults

Held = tuple[str, frozenset[int]] | None  # a worker's hold record: (source, unit ids)


def worker_name(pid: int) -> str:
    """As duecast names a worker process (worker_registry.worker_name): they all run on this host."""
    return f"{socket.gethostname()[:100]}:{pid}"


def keys(chaos: Chaos) -> Keys:
    return Keys(f"chaos-{chaos.suffix}")


def runs_table(chaos: Chaos) -> str:
    return chaos.settings.jobs.runs_table


def held_by(chaos: Chaos, pid: int) -> Held:
    """(source, unit ids) of a worker's hold record in Redis, or None (none, or it does not parse).
    A job queue's entries are runs: their units are the jobs the runs still hold (a run's finished
    jobs have left its members; a run gone has none left)."""
    try:
        found = ReadyQueue(chaos.redis.client, keys(chaos)).held_by(worker_name(pid))
    except BadHold:
        return None
    source, raws = found if found is not None else ("", [])
    units = set()
    for raw in raws:
        try:
            units.add(decode_entry(raw).id)
        except BadEntry:
            continue
    if source == JOBS and units:
        ids = ",".join(str(int(u)) for u in units)
        rows = chaos.query(f"SELECT members FROM `{runs_table(chaos)}` WHERE id IN ({ids})")
        units = {job for (members,) in rows for job in decode_members(members)}
    return (source, frozenset(units)) if source else None


def holder(chaos: Chaos, sources: Collection[str], timeout_s: float = 5.0, but: int = 0) -> Proc | None:
    """A live worker (not pid `but`) in the middle of a batch of one of `sources`, found by the hold
    record every worker keeps in Redis while it works a batch (the one redelivery reads); None if
    none is seen in time."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for proc in chaos.live_workers():
            record = held_by(chaos, proc.pid)
            if record is not None and record[0] in sources and proc.pid != but:
                return proc
        time.sleep(0.01)
    return None


def caught(chaos: Chaos, fault: Fault, held: Collection[Held], since: float | None = None) -> None:
    """Record the jobs and messages workers held when `fault` hit (`held_by` each: a dead worker's
    hold record stays in Redis until redelivery takes it); `since`: when recovery counts from
    (default: the fault). Re-scan batches are left to the re-scan checker."""
    measured = {JOBS} | ({chaos.group.source} if chaos.group else set())
    for record in held:
        if record is not None and record[0] in measured:
            chaos.holdings.append(Holding(fault, *record, fault.at if since is None else since))


def all_acked(chaos: Chaos, holding: Holding) -> bool:
    """Whether every unit of `holding` has been acked, before the fault or after."""
    if not holding.units:
        return True
    units = ",".join(str(int(u)) for u in holding.units)
    table = chaos.acks_tables()[holding.source]
    rows = chaos.query(f"SELECT COUNT(DISTINCT unit) FROM `{table}` WHERE unit IN ({units})")
    return int(rows[0][0]) == len(holding.units)


def kill_holder(chaos: Chaos, sources: Collection[str], timeout_s: float = 5.0) -> Proc:
    """SIGKILL a worker caught holding a batch of one of `sources`, or a random one if none is seen
    in time. Frozen (SIGSTOP) before its hold is read again, as it could have moved on to another
    batch since `holder` saw it (the soak's "killed holding" failed so now and then): if it has, it
    is let go and another looked for."""
    deadline = time.monotonic() + timeout_s
    while (proc := holder(chaos, sources, max(0.0, deadline - time.monotonic()))) is not None:
        if not freeze(proc):
            continue
        record = held_by(chaos, proc.pid)
        if record is not None and record[0] in sources:
            return kill_worker(chaos, proc)  # SIGKILL ends a stopped process too
        thaw(proc)
    return kill_worker(chaos)


def freeze(proc: Proc) -> bool:
    """SIGSTOP `proc`; False if it had ended first (a poison job kills its worker at any moment): it
    is reaped here, and `supervise` starts its successor."""
    try:
        os.kill(proc.pid, signal.SIGSTOP)
    except ProcessLookupError:  # reaped already
        return False
    return proc.alive()  # an unreaped corpse takes the signal too: polled, it is reaped


def thaw(proc: Proc) -> None:
    """SIGCONT `proc` if it still runs (a stopped process cannot end by itself, but may be killed)."""
    if proc.alive():
        os.kill(proc.pid, signal.SIGCONT)


def kill_worker(chaos: Chaos, proc: Proc | None = None) -> Proc:
    """SIGKILL `proc`, or a random live worker, and record what it held."""
    proc = proc or chaos.rng.choice(chaos.live_workers())
    chaos.fault("sigkill", proc.pid)
    chaos.procs.kill(proc)
    caught(chaos, chaos.faults[-1], [held_by(chaos, proc.pid)])
    return proc


def stop_worker(chaos: Chaos, proc: Proc | None = None) -> Proc:
    """SIGSTOP `proc`, or a random live worker (also if `proc` has ended); `resume` it later."""
    proc = proc or chaos.rng.choice(chaos.live_workers())
    while not freeze(proc):
        proc = chaos.rng.choice(chaos.live_workers())
    chaos.fault("sigstop", proc.pid)
    chaos.stopped.add(proc.pid)
    return proc


def stop_in_ack(chaos: Chaos, tries: int = 40) -> Proc | None:
    """Issue 24.1: SIGSTOP a worker holding jobs while it is inside a transaction that has written
    rows (its ack, in which the transactional `work` task runs; rarely a lease renewal), checked
    with the worker stopped; a miss is resumed at once (a pause of ~0.1 s) and another moment tried.
    Its session then sits idle in that transaction, its locks held, until the server ends it
    (`worker.idle_transaction_s`, about a lease); `resume` it later. None if never caught."""
    from tests.faults.procs import tcp_peers  # noqa: PLC0415 - Linux /proc, the fault tier's helper

    for _ in range(tries):
        proc = holder(chaos, (JOBS,), timeout_s=1.0)
        if proc is None:  # the workers got through the backlog between tries: a fresh one
            backlog(chaos)
            continue
        if not freeze(proc):
            continue
        time.sleep(0.15)  # MariaDB refreshes INNODB_TRX only when it was not read for 100 ms
        ports = {str(local) for local, remote in tcp_peers(proc.pid) if remote == chaos.mysql.port}
        rows = chaos.query(
            "SELECT p.HOST, t.trx_rows_locked FROM information_schema.INNODB_TRX t "
            "JOIN information_schema.PROCESSLIST p ON p.ID = t.trx_mysql_thread_id "
            "WHERE t.trx_rows_modified > 0"
        )
        locked = [int(n) for host, n in rows if str(host).rsplit(":", 1)[-1] in ports]
        held = held_by(chaos, proc.pid)  # still jobs: its next pop (of another source) replaces it
        if locked and held is not None and held[0] == JOBS and held[1]:
            chaos.fault("sigstop_in_ack", proc.pid)
            print(f"  stopped holding {len(held[1])} jobs, in a transaction holding {sum(locked)} row locks")
            chaos.stopped.add(proc.pid)
            caught(chaos, chaos.faults[-1], [held])
            return proc
        thaw(proc)
    return None


def resume(chaos: Chaos, proc: Proc) -> None:
    thaw(proc)
    chaos.stopped.discard(proc.pid)


def corrupt_a_dead_workers_hold(chaos: Chaos, within_s: float) -> None:
    """Issue 16.2: two workers die, and the hold record of one is overwritten with 0xff bytes. The
    leader must quarantine that record and still take the other's hold (and forget both workers) in
    the same look: before, the first corrupt record failed the whole look, every heartbeat."""
    backlog(chaos)
    corrupt = holder(chaos, (JOBS,)) or chaos.rng.choice(chaos.live_workers())
    other = holder(chaos, (JOBS,), but=corrupt.pid)
    kill_worker(chaos, corrupt)
    # At once: redelivery takes a dead worker's hold 2 s after its last heartbeat.
    chaos.redis.client.set(keys(chaos).inflight(worker_name(corrupt.pid)), b"\xff" * 64)
    chaos.fault("bad_hold", corrupt.pid)
    other = kill_worker(chaos, other)
    quarantine = keys(chaos).quarantine(NO_SOURCE)
    mark = f"hold:{worker_name(corrupt.pid)}:".encode()

    def handled() -> bool:
        quarantined = any(item.startswith(mark) for item in chaos.redis.client.lrange(quarantine, 0, -1))
        names = [worker_name(p.pid) for p in (corrupt, other)]
        rows = chaos.query("SELECT COUNT(*) FROM duecast_workers WHERE name IN (%s, %s)", names)
        return quarantined and rows[0][0] == 0

    wait_for(handled, within_s, "the corrupt hold quarantined and both dead workers handled")
    # From the kills: dead_after_s and the leader's next look (every heartbeat_s).
    chaos.measured.setdefault("bad_hold_handled_s", []).append(chaos.db_now() - chaos.faults[-3].at)


# ---------------------------------------------------------------- server faults


def restart_mariadb(chaos: Chaos, server: PrivateMariaDB, down_s: float) -> None:
    """SIGKILL the server (a crash: InnoDB recovers on start), keep it down `down_s`, start it again.
    What the workers held is measured from when it answers again."""
    held = _in_hand(chaos)
    chaos.fault("mariadb_restart")
    server.kill()
    time.sleep(down_s)  # the outage itself: nothing to poll for
    server.start()
    chaos.reconnect()
    caught(chaos, chaos.faults[-1], held, chaos.db_now())


def hold_read_lock(chaos: Chaos, lock_s: float) -> None:
    """FLUSH TABLES WITH READ LOCK for `lock_s` (issue 16.8): every write and commit waits; workers
    whose lease renewals cannot land fence themselves. Measured from the UNLOCK."""
    locker = connect(chaos.mysql)
    try:
        with locker.cursor() as cur:
            held = _in_hand(chaos)
            chaos.fault("mariadb_read_lock")
            cur.execute("FLUSH TABLES WITH READ LOCK")
            time.sleep(lock_s)  # the stall itself: nothing to poll for
            cur.execute("UNLOCK TABLES")
    finally:
        locker.close()
    caught(chaos, chaos.faults[-1], held, chaos.db_now())


def fail_redis_over(chaos: Chaos) -> None:
    """SENTINEL FAILOVER (issue 24.10) once a worker holds jobs or messages: the replica is promoted
    while the old master takes writes until the Sentinels demote it (what was written there
    meanwhile is lost). What the workers held is measured from the fault, the handover included;
    how long the Sentinels took to name a new master that takes writes goes to `measured`."""
    assert isinstance(chaos.redis, SentinelRedis), "a failover needs the Sentinel topology"
    held = _in_hand(chaos)
    chaos.fault("sentinel_failover")
    chaos.redis.failover()
    chaos.measured.setdefault("sentinel_failover_s", []).append(chaos.db_now() - chaos.faults[-1].at)
    caught(chaos, chaos.faults[-1], held)


def _in_hand(chaos: Chaos) -> list[Held]:
    """Every live worker's hold, once one holds jobs or messages (if one does within 5 s), so that a
    server fault meets work in flight."""
    backlog(chaos)
    holder(chaos, chaos.acks_tables())
    return [held_by(chaos, p.pid) for p in chaos.live_workers()]


def backlog(chaos: Chaos, messages: bool = False) -> None:
    """A few batches' worth of jobs (or of the group's messages) just before a fault, so that it
    meets workers with a batch of them in hand whatever the pace of the waves."""
    if messages:
        assert chaos.group is not None
        chaos.group.publish(chaos.settings, 4 * chaos.pop_batch)
    else:
        chaos.enqueue(4 * chaos.pop_batch)
