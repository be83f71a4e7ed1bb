"""The chaos suite's tasks, with a record independent of duecast's bookkeeping.

`work` is a transactional task: it appends "n pid" to the execution log (DUECAST_CHAOS_EXEC_LOG,
one O_APPEND write per line) when it runs, and inserts (n, pid) into the acks table
(DUECAST_CHAOS_ACKS) in the transaction that finishes the job. So the log holds every execution
and the table every ack that committed: the checker needs nothing else. Poison tasks: `raise`
(always fails), `die` (SIGKILLs its worker), `hang` (never returns).
"""

from __future__ import annotations

import os
import signal
import time
from typing import Any

import pymysql.cursors

from duecast import Registry

handlers = Registry()


def log_execution(n: int) -> None:
    fd = os.open(os.environ["DUECAST_CHAOS_EXEC_LOG"], os.O_APPEND | os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{n} {os.getpid()}\n".encode())
    finally:
        os.close(fd)


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
