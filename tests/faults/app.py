"""Handlers the fault tier's worker processes run (`--app tests.faults.app`), with an independent log.

Every execution of a row appends "source id attempt pid" to the file named by DUECAST_TEST_EXEC_LOG,
one os.write per line on an O_APPEND descriptor (atomic for a line this small), so the log does not
depend on duecast's own bookkeeping. The knobs are read from the environment at each call, so one
module serves every process and each process can be given its own:

- DUECAST_TEST_ROW_DELAY_MS: sleep this long before each row (a batch slow enough to kill mid-way);
- DUECAST_TEST_BATCH_MARKER: at the start of each batch, atomically write {"pid", "entries"} there
  (the test waits for it instead of sleeping);
- DUECAST_TEST_GATE: after writing the marker, wait until this file exists (a handler parked for
  as long as the test needs, e.g. while it kills the worker's MySQL session);
- DUECAST_TEST_GATE_AFTER_ROWS: wait at the gate after this many rows of the batch ran (default 0:
  before any);
- DUECAST_TEST_FAIL_IDS: comma-separated ids; a batch holding one of them raises once its rows ran
  (logged as executed: the handler ran and failed).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from duecast.shared.acks import Ack, Row
from duecast.shared.api.handlers import Registry

ONEOFF = "fault_oneoff"  # one-off source: success deletes the row
RESCAN = "fault_rescan"  # re-scan source: success records the attempt that ran in checked_by_attempt

GATE_MAX_S = 60.0  # a forgotten gate must not park a worker forever; teardown kills it long before
_POLL_S = 0.05

handlers = Registry()


def log_execution(source: str, row: Row) -> None:
    path = os.environ["DUECAST_TEST_EXEC_LOG"]
    line = f"{source} {int(row['id'])} {int(row['dc_attempt'])} {os.getpid()}\n".encode()
    fd = os.open(path, os.O_APPEND | os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


def _batch_started(rows: list[Row]) -> None:
    marker = os.environ.get("DUECAST_TEST_BATCH_MARKER")
    if marker:
        entries = [[int(r["id"]), int(r["dc_attempt"])] for r in rows]
        tmp = Path(f"{marker}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps({"pid": os.getpid(), "entries": entries}))
        tmp.replace(marker)  # readers see the whole marker or none


def _wait_at_gate() -> None:
    gate = os.environ.get("DUECAST_TEST_GATE")
    if gate:
        deadline = time.monotonic() + GATE_MAX_S
        while not os.path.exists(gate) and time.monotonic() < deadline:
            time.sleep(_POLL_S)


class InjectedError(RuntimeError):
    """The handler failure a test asked for with DUECAST_TEST_FAIL_IDS."""


def _run(source: str, rows: list[Row]) -> None:
    """A batch: marker, then each row (delay, log), stopping at the gate after GATE_AFTER_ROWS."""
    if not rows:
        # The worker calls a batch handler even when every entry of a batch was stale (no rows):
        # that is not a batch start.
        return
    _batch_started(rows)
    delay_s = int(os.environ.get("DUECAST_TEST_ROW_DELAY_MS", "0")) / 1000
    gate_after = int(os.environ.get("DUECAST_TEST_GATE_AFTER_ROWS", "0"))
    for n, row in enumerate(rows):
        if n == gate_after:
            _wait_at_gate()
        if delay_s:
            time.sleep(delay_s)
        log_execution(source, row)
    if gate_after >= len(rows):
        _wait_at_gate()
    fail = {int(i) for i in os.environ.get("DUECAST_TEST_FAIL_IDS", "").split(",") if i}
    if fail & {int(r["id"]) for r in rows}:
        raise InjectedError(f"injected failure for ids {sorted(fail)}")


@handlers.batch(ONEOFF)
def run_oneoff(rows: list[Row]) -> None:
    _run(ONEOFF, rows)


@handlers.batch(RESCAN, columns=["checked_by_attempt"])
def run_rescan(rows: list[Row]) -> list[Ack]:
    _run(RESCAN, rows)
    return [Ack.touch(checked_by_attempt=int(r["dc_attempt"])) for r in rows]
