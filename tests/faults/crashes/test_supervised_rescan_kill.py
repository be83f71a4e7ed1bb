"""Issue 24.4: a re-scan worker SIGKILLed under `duecast worker --supervise` while it holds started
rows (row mode) or spans (range mode) costs a restart, not a lease. The worker names each started
batch in Redis (its started set); the supervisor, the moment waitpid reports the exit, makes what is
still RUNNING under that attempt due again, and the dispatcher's next claim pushes it ahead of the
backlog (item 6). Real dispatcher, supervisor and worker processes, default lease (15 s).

Measured: from the kill to the moment every row of the killed batch has been checked again and
acked under a new attempt (restart of the child included). Asserted below the lease: the issue's
target is 3 s on an idle machine, and a loaded two-core runner (load ~6) can stretch a Python
start-up several-fold, while a recovery by the lease could not come in under 15 s at all. The
figure is printed (`pytest -s`). Nothing is back-dated: no lease runs out during the test.

Every ack that lands is recorded by a trigger (RUNNING -> IDLE with the due column moved: an ack,
not a requeue), so "no (id, attempt) acked twice" is read from MySQL, not from duecast's counts.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from duecast.shared.acks import Ack
from duecast.shared.queries.ranges import ranges_table
from duecast.shared.storage.db import Database
from duecast.shared.storage.range_batch import Span
from duecast.shared.storage.range_store import RangeStore
from duecast.shared.storage.row_batch import RowBatch
from duecast.shared.storage.source_store import SourceStore
from tests.faults.checker import classify, read_log
from tests.faults.conftest import APP, RUNNING, FaultEnv

pytestmark = pytest.mark.faults

ROWS = 60
RANGE_SIZE = 10  # ids 1..60: spans 1..7 (span 1 holds ids 1-9, span 7 only id 60)
GATE_AFTER_ROWS = 3  # the victim runs this many rows of its batch, then waits at the gate: killed there


@dataclass(frozen=True)
class Units:
    """What the mode dispatches: the source's rows, or its ranges table's spans."""

    table: str
    key: str
    due: str

    def of(self, row_id: int) -> int:
        return row_id if self.key == "id" else row_id // RANGE_SIZE + 1


def units_of(env: FaultEnv) -> Units:
    if env.source.mode == "ranges":
        return Units(ranges_table(env.source), "range_id", "checked_at")
    return Units(env.source.table, "id", "due_at")


def audit_acks(env: FaultEnv, units: Units) -> str:
    """A trigger that records every ack landing on a unit as (key, attempt); returns its table."""
    audit = f"{env.source.table}_acks"
    env.query(f"CREATE TABLE `{audit}` (unit BIGINT NOT NULL, attempt INT NOT NULL)")
    env.query(
        f"CREATE TRIGGER `{audit}_t` AFTER UPDATE ON `{units.table}` FOR EACH ROW "
        f"INSERT INTO `{audit}` SELECT OLD.`{units.key}`, OLD.dc_attempt FROM DUAL "
        f"WHERE OLD.dc_state = {RUNNING} AND NEW.dc_state = 0 "
        f"AND NOT (NEW.`{units.due}` <=> OLD.`{units.due}`)"
    )
    return audit


def pending(env: FaultEnv, units: Units) -> set[int]:
    """Rows not yet checked and acked under their unit's current attempt."""
    if units.key == "id":
        return env.pending()
    rows = env.query(
        f"SELECT b.id FROM {{t}} b JOIN `{units.table}` r ON r.range_id = b.id DIV {RANGE_SIZE} + 1 "
        "WHERE NOT (r.dc_state = 0 AND r.dc_attempt > 0 AND b.checked_by_attempt <=> r.dc_attempt)"
    )
    return {int(r[0]) for r in rows}


def started_units(env: FaultEnv, units: Units) -> dict[int, int]:
    rows = env.query(f"SELECT `{units.key}`, dc_attempt FROM `{units.table}` WHERE dc_state = %s", (RUNNING,))
    return {int(k): int(a) for k, a in rows}


def children(pid: int) -> list[int]:
    return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


def stale_ack(env: FaultEnv, units: Units, ids: set[int], attempt: int) -> tuple[int, int]:
    """The killed attempt's ack, made now through the real ack path: (acked, stale)."""
    db = Database(env.mysql)
    try:
        if units.key == "id":
            store = SourceStore(db, env.source)
            store.verify()
            rows = [{"id": i, "dc_attempt": attempt} for i in sorted(ids)]
            counts = RowBatch(store, rows, 0).ack([(r, Ack.touch(checked_by_attempt=attempt)) for r in rows])
            return counts.acked, counts.stale
        ranged = RangeStore(db, env.source)
        ranged.verify()
        spans = []
        for span_id in sorted({units.of(i) for i in ids}):
            lo = (span_id - 1) * RANGE_SIZE
            span = Span({"range_id": span_id, "lo": lo, "hi": lo + RANGE_SIZE, "dc_attempt": attempt}, 1)
            row = {"id": max(lo, 1), "dc_attempt": attempt}
            span.succeeded, span.changes = 1, [(row, Ack.touch(checked_by_attempt=attempt))]
            spans.append(span)
        counts = ranged.finish_spans(spans)
        return counts.acked, counts.stale
    finally:
        db.close()


@pytest.mark.parametrize("mode", ["rows", "ranges"])
def test_a_supervised_kill_of_a_rescan_worker_costs_a_restart_not_a_lease(
    fault_env: Callable[..., FaultEnv], mode: str
) -> None:
    extra = {"mode": "ranges", "range_size": RANGE_SIZE} if mode == "ranges" else {}
    env = fault_env("rescan", **extra)
    assert env.source.lease_s == 15.0  # the default: a recovery by the lease takes at least this
    units = units_of(env)
    audit = audit_acks(env, units)
    ids = env.insert(ROWS)
    gate, marker = env.tmp / "gate", env.tmp / "batch.marker"
    env.dispatcher()
    args = ["-m", "duecast.worker", "--supervise", "--app", APP, "--source", env.source.name]
    supervisor = env.procs.spawn(
        "supervisor",
        args,
        {
            **env.env,
            # Range mode pops spans: 30 rows' worth is three spans (rows mode: ten rows).
            "DUECAST_WORKER__POP_BATCH": "30" if mode == "ranges" else "10",
            "DUECAST_TEST_BATCH_MARKER": str(marker),
            "DUECAST_TEST_GATE": str(gate),
            "DUECAST_TEST_GATE_AFTER_ROWS": str(GATE_AFTER_ROWS),
        },
    )
    batch = env.wait_batch(marker)
    (victim,) = children(supervisor.pid)
    assert batch.pid == victim
    env.wait_for(lambda: len(env.executions(victim)) >= GATE_AFTER_ROWS, "the victim to park mid-batch")
    held = started_units(env, units)
    assert held
    assert set(held.values()) == {1}
    assert {units.of(i) for i in batch.ids} == set(held), "what it started is what it runs"

    os.kill(victim, signal.SIGKILL)
    killed = time.monotonic()
    gate.touch()  # the next child runs straight through
    env.wait_for(lambda: not pending(env, units) & batch.ids, "the killed batch to be checked again")
    recovery_s = time.monotonic() - killed
    print(f"\n{mode}: {len(held)} held units checked again {recovery_s:.2f}s after the kill")
    assert recovery_s < env.source.lease_s, (
        f"{recovery_s:.1f}s: that is the lease's doing, not the supervisor's"
    )
    said = f"handed back {len(held)} started and 0 popped rows"
    env.wait_for(lambda: said in supervisor.log.read_text(), "the supervisor to say what it handed back")

    env.wait_for(lambda: not pending(env, units), "every row to be checked")
    outcomes = env.column("checked_by_attempt")
    verdict = classify(read_log(env.exec_log), env.source.name, ids, pending(env, units), outcomes)
    assert not verdict.lost
    assert not verdict.unexpected
    assert not verdict.duplicates, "one execution per (id, attempt)"
    ran_by_victim = {e.id for e in verdict.executions if e.pid == victim}
    assert len(ran_by_victim) == GATE_AFTER_ROWS
    assert verdict.redundant == dict.fromkeys(sorted(ran_by_victim), (1, 2))
    assert not verdict.wrong_outcome
    assert {i: verdict.attempts(i)[-1] for i in batch.ids} == dict.fromkeys(batch.ids, 2)

    acks = env.query(f"SELECT unit, attempt, COUNT(*) FROM `{audit}` GROUP BY unit, attempt")
    assert {int(n) for _, _, n in acks} == {1}, "no (id, attempt) acked twice"
    landed = {(int(u), int(a)) for u, a, _ in acks}
    assert not {(u, 1) for u in held} & landed, "the killed attempt never acked"
    assert {u for u, _ in landed} == {units.of(i) for i in ids}

    # The killed attempt's ack, were it to come now, is fenced off and changes nothing.
    before = env.column("checked_by_attempt")
    acked, stale = stale_ack(env, units, batch.ids, attempt=1)
    assert acked == 0
    assert stale > 0
    assert env.column("checked_by_attempt") == before
    assert env.query(f"SELECT COUNT(*) FROM `{audit}`") == [(len(landed),)]
