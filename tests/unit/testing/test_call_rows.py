"""duecast.testing.call_row / call_batch: a re-scan handler called as the worker calls it, no server."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from duecast import Ack, Registry
from duecast.shared.settings import SourceSettings
from duecast.testing import InvalidAck, TestingError, TimedOut, call_batch, call_row

app = Registry()
seen: list[dict[str, Any]] = []
release = threading.Event()


@app.row("users", columns=["status"])
def check_user(row: dict[str, Any]) -> Ack | None:
    seen.append(dict(row))
    if row["status"] == "broken":
        raise ConnectionError("the checked service did not answer")
    if row["status"] == "moves":
        return Ack.touch(user_id=99)  # the row's id: a handler may not move it
    if row["status"] == "sleeps":
        release.wait(5)
    return Ack.touch(status="ok") if row["status"] == "new" else None


@app.row("accounts")
async def check_account(row: dict[str, Any]) -> Ack | None:
    if row.get("slow"):
        await asyncio.sleep(5)
    return Ack.retry(delay_s=5)  # a job's Ack: refused for a source's row


@app.batch("orders", columns=["total"])
def check_orders(rows: list[dict[str, Any]]) -> list[Ack | None]:
    return [Ack.delete() if r["total"] == 0 else None for r in rows]


@pytest.fixture(autouse=True)
def _clear() -> None:
    seen.clear()


def test_a_row_handler_gets_only_its_columns_and_its_ack_back() -> None:
    row = {"user_id": 7, "status": "new", "email": "not read"}
    assert call_row(app, "users", row, id_column="user_id") == Ack.touch(status="ok")
    assert seen == [{"user_id": 7, "dc_attempt": 1, "status": "new"}]  # as the worker reads it


def test_what_the_handler_raises_is_raised() -> None:
    with pytest.raises(ConnectionError, match="did not answer"):
        call_row(app, "users", {"id": 1, "status": "broken"})


def test_an_ack_the_worker_refuses_raises_its_reason() -> None:
    with pytest.raises(InvalidAck, match="'user_id', duecast's own column of source users"):
        call_row(app, "users", {"user_id": 1, "status": "moves"}, id_column="user_id")
    with pytest.raises(InvalidAck, match=r"Ack\.retry\(\) is for jobs and consumer groups"):
        call_row(app, "accounts", {"id": 1})
    with pytest.raises(InvalidAck, match="'status', which is not a column of users"):
        call_row(app, "users", {"id": 1, "status": "new"}, table_columns=["id", "updated_time"])


def test_the_time_limit_applies_to_plain_and_async_handlers() -> None:
    try:
        with pytest.raises(TimedOut, match=r"users: the handler ran longer than its timeout_s \(0\.2s\)"):
            call_row(app, "users", {"id": 1, "status": "sleeps"}, timeout_s=0.2)
    finally:
        release.set()
    settings = SourceSettings(
        name="accounts", table="acct", due_column="checked_at", period_s=5, timeout_s=0.2
    )
    with pytest.raises(TimedOut):
        call_row(app, "accounts", {"id": 1, "slow": True}, settings=settings)


def test_call_batch_gives_each_rows_outcome() -> None:
    outcomes = call_batch(app, "orders", [{"id": 1, "total": 0}, {"id": 2, "total": 5}])
    assert outcomes == [Ack.delete(), Ack.default()]
    mixed = call_batch(app, "users", [{"id": 1, "status": "new"}, {"id": 2, "status": "broken"}])
    assert mixed[0] == Ack.touch(status="ok")
    assert isinstance(mixed[1], ConnectionError)


def test_mistakes_in_the_test_are_one_line() -> None:
    with pytest.raises(TestingError, match="no handler for source 'nope'"):
        call_row(app, "nope", {"id": 1})
    with pytest.raises(TestingError, match=r"names columns \['status'\] the row does not have"):
        call_row(app, "users", {"id": 1})
    with pytest.raises(TestingError, match="has a batch handler"):
        call_row(app, "orders", {"id": 1, "total": 1})
    with pytest.raises(TestingError, match="the row has no 'id'"):
        call_row(app, "users", {"user_id": 1, "status": "new"})
