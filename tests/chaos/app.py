"""The chaos suite's tasks and re-scan handlers, with a record independent of duecast's bookkeeping.

`work` is a transactional task: it appends "n pid" to the execution log (DUECAST_CHAOS_EXEC_LOG,
one O_APPEND write per record, see execlog) when it runs, and inserts (n, pid) into the acks table
(DUECAST_CHAOS_ACKS) in the transaction that finishes the job. So the log holds every execution
and the table every ack that committed: the checker needs nothing else. Poison tasks: `raise`
(always fails), `die` (SIGKILLs its worker), `hang` (never returns). The re-scan handlers append
"source id attempt pid" per row to DUECAST_CHAOS_RESCAN_LOG; their acks are recorded by triggers
(tests/chaos/rescan.py).
"""

from __future__ import annotations

import os
import signal
import time
from typing import Any

import pymysql.cursors

from duecast import Ack, Registry, Row
from tests.chaos import execlog

handlers = Registry()
RESCAN_ROWS = "chaos_rows"  # row mode: the ack writes checked_by_attempt and checked_by_pid
RESCAN_RANGES = "chaos_ranges"  # range mode: a plain success, no business row written
# A check costs something (a real one reads or calls out): a batch of 100 rows lasts 50 ms, long
# enough for the soak's faults to meet re-scan batches half-way.
RESCAN_ROW_S = 0.0005


def log_execution(n: int) -> None:
    execlog.append("DUECAST_CHAOS_EXEC_LOG", n, os.getpid())


@handlers.task("work", transactional=True)
def work(payload: Any, cursor: pymysql.cursors.Cursor) -> None:
    n = int(payload["n"])
    log_execution(n)
    cursor.execute(
        f"INSERT INTO `{os.environ['DUECAST_CHAOS_ACKS']}` (n, pid) VALUES (%s, %s)", (n, os.getpid())
    )


@handlers.task("raise")
def always_raise(payload: Any) -> None:
    log_execution(int(payload["n"]))
    raise RuntimeError("poison: always fails")


@handlers.task("die")
def die(payload: Any) -> None:
    log_execution(int(payload["n"]))
    os.kill(os.getpid(), signal.SIGKILL)


@handlers.task("hang")
def hang(payload: Any) -> None:
    log_execution(int(payload["n"]))
    while True:  # until jobs.timeout_s makes the worker leave
        time.sleep(1)


def check_each(source: str, rows: list[Row]) -> None:
    """Log each row as its check starts (tests.chaos.execlog: one write per record)."""
    for row in rows:
        execlog.append(
            "DUECAST_CHAOS_RESCAN_LOG", source, int(row["id"]), int(row["dc_attempt"]), os.getpid()
        )
        time.sleep(RESCAN_ROW_S)


@handlers.batch(RESCAN_ROWS, columns=["checked_by_attempt"])
def check_rows(rows: list[Row]) -> list[Ack]:
    check_each(RESCAN_ROWS, rows)
    # What this execution saw lands with its ack: the checker compares it with the fence's attempt.
    return [Ack.touch(checked_by_attempt=int(r["dc_attempt"]), checked_by_pid=os.getpid()) for r in rows]


@handlers.batch(RESCAN_RANGES, columns=["id"])
def check_ranges(rows: list[Row]) -> None:
    check_each(RESCAN_RANGES, rows)
