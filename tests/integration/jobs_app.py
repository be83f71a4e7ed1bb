"""Tasks for the jobs tests: every run is recorded with the time the handler started."""

from __future__ import annotations

import os
import signal
import threading
import time
from typing import Any

import pymysql.cursors

from duecast import Ack, JobContext, Registry, current_job

handlers = Registry()
RUNS: list[tuple[Any, float]] = []
CONTEXTS: list[JobContext] = []  # what `whoami` saw of its own job
_lock = threading.Lock()


def runs_of(task_payloads: object) -> int:
    with _lock:
        return sum(1 for p, _ in RUNS if p == task_payloads)


@handlers.task("whoami")
def whoami(payload: Any) -> Ack | None:
    with _lock:
        CONTEXTS.append(current_job())
    # The first run of payload "again" asks to run once more: attempt 2 must see itself as such.
    return Ack.retry(0) if payload == "again" and current_job().attempt == 1 else None


@handlers.task("record")
def record(payload: Any) -> None:
    with _lock:
        RUNS.append((payload, time.time()))


@handlers.task("record_slowly")
def record_slowly(payload: Any) -> None:
    """record, 20 ms after it starts: a few are in flight at any instant (the task pause tests)."""
    record(payload)
    time.sleep(0.02)


@handlers.task("fail_always")
def fail_always(payload: Any) -> None:
    record(payload)
    raise RuntimeError(f"boom {payload}")


@handlers.task("snooze_once")
def snooze_once(payload: Any) -> Ack | None:
    """Asks to run again in an hour the first time; done the second time."""
    record(payload)
    return Ack.retry(3600) if runs_of(payload) == 1 else None


@handlers.task("give_up")
def give_up(payload: Any) -> Ack:
    record(payload)
    return Ack.discard(f"nothing to do for {payload}")


@handlers.task("credit", transactional=True)
def credit(payload: Any, cursor: pymysql.cursors.Cursor) -> None:
    """Database-local work: its write commits with the job's ack, or not at all."""
    record(payload)
    cursor.execute(
        f"INSERT INTO `{payload['table']}` (account, amount) VALUES (%s, %s)",
        (payload["account"], payload["amount"]),
    )
    if payload.get("then_fail"):
        raise RuntimeError("failed after writing")


@handlers.task("park")
def park(payload: Any) -> None:
    """Runs until the file DUECAST_TEST_GATE names exists (a long job, for as long as a test needs;
    never use in-process)."""
    record(payload)
    gate = os.environ["DUECAST_TEST_GATE"]
    deadline = time.monotonic() + 120  # a forgotten gate must not park a worker forever
    while not os.path.exists(gate) and time.monotonic() < deadline:
        time.sleep(0.05)


@handlers.task("kill_worker")
def kill_worker(payload: Any) -> None:
    """A poison job: takes its worker process down with it (never use in-process). With
    DUECAST_TEST_DEATHS set, it first appends the time of its death to that file."""
    deaths = os.environ.get("DUECAST_TEST_DEATHS")
    if deaths:
        with open(deaths, "a") as f:
            f.write(f"{time.time()}\n")
    os.kill(os.getpid(), signal.SIGKILL)
