"""The chaos suite's tasks and re-scan handlers, with a record independent of duecast's bookkeeping.

`work` is a transactional task: it appends "n pid" to the execution log (DUECAST_CHAOS_EXEC_LOG,
one O_APPEND write per record, see execlog) when it runs, and inserts (n, job id, pid, time) into
the acks table (DUECAST_CHAOS_ACKS) in the transaction that finishes the job. So the log holds every
execution and the table every ack that committed (and when: recovery times are read from it): the
checker needs nothing else. The soak's cluster group's consumer does the same for each message
(DUECAST_CHAOS_MSG_LOG, DUECAST_CHAOS_MSG_ACKS; the message's id in place of the job's). Poison tasks: `raise`
(always fails), `die` (SIGKILLs its worker), `hang` (never returns). The re-scan handlers append
"source id attempt pid time" per row to DUECAST_CHAOS_RESCAN_LOG; their acks are recorded by triggers
(tests/chaos/rescan.py). The async task `limited` (`max_running_per_key` of its queue, tests/chaos/limited.py)
logs its execution like `work`, and "S|E n key pid time" as each call starts and ends to
DUECAST_CHAOS_LIMITED_LOG; its ack is recorded by a trigger on the jobs table.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from typing import Any

import pymysql.cursors

from duecast import Ack, Message, Registry, Row, current_job
from tests.chaos import execlog

handlers = Registry()
RESCAN_ROWS = "chaos_rows"  # row mode: the ack writes checked_by_attempt and checked_by_pid
RESCAN_RANGES = "chaos_ranges"  # range mode: a plain success, no business row written
# A check costs something (a real one reads or calls out): a batch of 100 rows lasts 50 ms, long
# enough for the soak's faults to meet re-scan batches half-way.
RESCAN_ROW_S = 0.0005
LIMITED = "limited"  # the soak's task under [jobs.task_limits.limited] (tests/chaos/limited.py)
# A limited call lasts this long: long enough that several overlap (the limit then binds), short
# enough that a wave's share is done within the wave.
LIMITED_CALL_S = 0.1
HEALTHY_TASKS = ("work", LIMITED)  # every job of these must be acked; the rest are poison
TOPIC, GROUP = (
    "chaos_events",
    "chaos_group",
)  # the soak's cluster group (source topics.chaos_events-chaos_group)


def log_execution(n: int) -> None:
    execlog.append("DUECAST_CHAOS_EXEC_LOG", n, os.getpid())


@handlers.task("work", transactional=True)
def work(payload: Any, cursor: pymysql.cursors.Cursor) -> None:
    n = int(payload["n"])
    log_execution(n)
    record_ack(cursor, "DUECAST_CHAOS_ACKS", n, current_job().id)


def record_ack(cursor: pymysql.cursors.Cursor, table: str, n: int, unit: int) -> None:
    """In the transaction that finishes the job or message: it lands if and only if that does."""
    cursor.execute(
        f"INSERT INTO `{os.environ[table]}` (n, unit, pid, at) VALUES (%s, %s, %s, UNIX_TIMESTAMP(NOW(6)))",
        (n, unit, os.getpid()),
    )


@handlers.task(LIMITED)
async def limited(payload: Any) -> None:
    """A call to a service the limit protects: its start and end are what the limits checker counts.
    Not transactional (an async task cannot be): its ack is the delete of its job's row."""
    n, key = int(payload["n"]), str(payload["key"])
    log_execution(n)
    execlog.append("DUECAST_CHAOS_LIMITED_LOG", "S", n, key, os.getpid(), f"{time.time():.6f}")
    await asyncio.sleep(LIMITED_CALL_S)
    execlog.append("DUECAST_CHAOS_LIMITED_LOG", "E", n, key, os.getpid(), f"{time.time():.6f}")


@handlers.consumer(TOPIC, group=GROUP, transactional=True)
def consume(message: Message, cursor: pymysql.cursors.Cursor) -> None:
    n = int(message.payload["n"])
    execlog.append("DUECAST_CHAOS_MSG_LOG", n, os.getpid())
    record_ack(cursor, "DUECAST_CHAOS_MSG_ACKS", n, message.id)


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
    while True:  # given up at jobs.timeout_s; its stuck thread makes the worker leave (code 75)
        time.sleep(1)


def check_each(source: str, rows: list[Row]) -> None:
    """Log each row as its check starts (tests.chaos.execlog: one write per record)."""
    for row in rows:
        execlog.append(
            "DUECAST_CHAOS_RESCAN_LOG",
            source,
            int(row["id"]),
            int(row["dc_attempt"]),
            os.getpid(),
            f"{time.time():.6f}",
        )
        time.sleep(RESCAN_ROW_S)


@handlers.batch(RESCAN_ROWS, columns=["checked_by_attempt"])
def check_rows(rows: list[Row]) -> list[Ack]:
    check_each(RESCAN_ROWS, rows)
    # What this execution saw lands with its ack: the checker compares it with the fence's attempt.
    return [Ack.touch(checked_by_attempt=int(r["dc_attempt"]), checked_by_pid=os.getpid()) for r in rows]


@handlers.row(RESCAN_RANGES, columns=["id"])
async def check_range_row(row: Row) -> None:
    """The range-mode source's check is an `async def`: its rows overlap on the worker's event loop."""
    execlog.append(
        "DUECAST_CHAOS_RESCAN_LOG",
        RESCAN_RANGES,
        int(row["id"]),
        int(row["dc_attempt"]),
        os.getpid(),
        f"{time.time():.6f}",
    )
    await asyncio.sleep(RESCAN_ROW_S)
