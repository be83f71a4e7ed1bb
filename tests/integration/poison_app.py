"""Tasks whose outcomes the database once refused, stalling their whole ack (issue 25, item 1), and
tasks that raise SystemExit (item 7). Each payload says what the task does."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pymysql.cursors

from duecast import Ack, Registry

handlers = Registry()
SURROGATE_NAME = b"report-\xff.csv".decode("utf-8", "surrogateescape")  # a file name, as os.listdir gives it


@handlers.task("ok")
def ok(payload: Any) -> None:
    return None


@handlers.task("poison")
def poison(payload: str) -> Ack | None:
    if payload == "surrogate":
        raise RuntimeError(f"cannot open {SURROGATE_NAME}")
    if payload == "exit":
        raise SystemExit(2)  # argparse, sys.exit() in a library
    if payload == "discard_surrogate":
        return Ack.discard(f"bad file {SURROGATE_NAME}")
    if payload == "discard_huge":
        return Ack("discard", reason="x" * 20_000_000)  # built by hand: skips Ack.discard's cut
    if payload == "retry_far":
        return Ack.retry(delay_s=1e10)  # ValueError in the task: past jobs.max_delay_s
    if payload == "retry_20y":
        return Ack.retry(delay_s=20 * 365 * 86400.0)  # past jobs.max_delay_s: refused by the store
    if payload == "retry_at_end":
        return Ack.retry(at=datetime(9999, 12, 31, tzinfo=UTC))
    if payload.startswith("forged "):  # Ack("retry", delay_s=nan/inf/-1e12/1e18): skips the constructor
        return Ack("retry", delay_s=float(payload.split()[1]))
    raise AssertionError(payload)


@handlers.task("exit_in_transaction", transactional=True)
def exit_in_transaction(payload: Any, cursor: pymysql.cursors.Cursor) -> None:
    raise SystemExit(3)
