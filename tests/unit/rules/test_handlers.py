"""The handler API (shared/api/handlers.py): registration, Ack validation, and per-row outcomes.

A handler's failure is data (that row's outcome), never an exception out of Handler.run: the
worker acks the good rows of a batch and leaves the failed ones for the sweeper. Task routing and
registry loading are in test_handlers_tasks.py.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Iterator

import pytest

from duecast.shared.acks import Ack, Row
from duecast.shared.api.handlers import Handler, Registry
from duecast.shared.settings import JOBS_SOURCE
from duecast.shared.states import ATTEMPT_COLUMN, DISPATCHED_AT_COLUMN, STATE_COLUMN
from tests.unit.rules.test_handlers_async import arun

ROWS: list[Row] = [{"id": i, "dc_attempt": 1} for i in range(1, 6)]


# --- Ack --------------------------------------------------------------------------------------------


def test_ack_constructors() -> None:
    assert Ack.default() == Ack() == Ack("default", 0.0, ())
    assert Ack.delete().action == "delete"
    touch = Ack.touch(2, status=3, note="x")
    assert (touch.action, touch.delay_s) == ("touch", 2.0)
    assert isinstance(touch.delay_s, float)
    assert touch.values == (("note", "x"), ("status", 3))  # sorted: equal acks group together
    assert Ack.touch(status=3, note="x") == Ack.touch(note="x", status=3)
    assert hash(Ack.touch(status=3)) == hash(Ack.touch(status=3))


def test_ack_touch_rejects_negative_delay() -> None:
    with pytest.raises(ValueError, match="delay_s"):
        Ack.touch(-0.001)
    assert Ack.touch(0).delay_s == 0.0


@pytest.mark.parametrize("delay", [math.nan, math.inf])
def test_ack_touch_rejects_non_finite_delay(delay: float) -> None:
    with pytest.raises(ValueError, match="delay_s"):
        Ack.touch(delay)


@pytest.mark.parametrize("name", ["bad name", "x`y", "1col", "a;b", "é"])
def test_ack_touch_rejects_bad_column_names(name: str) -> None:
    with pytest.raises(ValueError, match="not an allowed SQL identifier"):
        Ack.touch(**{name: 1})


@pytest.mark.parametrize("name", [STATE_COLUMN, ATTEMPT_COLUMN, DISPATCHED_AT_COLUMN])
def test_ack_touch_rejects_duecast_columns(name: str) -> None:
    with pytest.raises(ValueError, match=name):
        Ack.touch(**{name: 0})


# --- registration -----------------------------------------------------------------------------------


def test_row_batch_and_task_registration() -> None:
    reg = Registry()

    @reg.row("users", columns=["status"])
    def on_user(row: Row) -> Ack | None:
        return None

    @reg.batch("orders")
    def on_orders(rows: list[Row]) -> list[Ack | None] | None:
        return None

    @reg.task("send_mail")
    def send_mail(payload: object) -> Ack | None:
        return None

    assert reg.sources == ["jobs", "orders", "users"]
    users, orders, jobs = reg.handler("users"), reg.handler("orders"), reg.handler(JOBS_SOURCE)
    assert (users.fn, users.batch, users.columns) == (on_user, False, ("status",))
    assert (orders.fn, orders.batch, orders.columns) == (on_orders, True, ())
    assert (jobs.batch, jobs.columns) == (False, ("task", "payload"))
    # The decorators hand the function back unchanged: it stays callable by the user's own code.
    assert on_user({"x": 1}) is None


def test_several_tasks_share_one_jobs_handler() -> None:
    reg = Registry()
    reg.task("a")(lambda p: None)
    first = reg.handler(JOBS_SOURCE)
    reg.task("b")(lambda p: None)
    assert reg.handler(JOBS_SOURCE) is first
    assert reg.sources == [JOBS_SOURCE]


def test_duplicate_registrations_rejected() -> None:
    reg = Registry()
    reg.row("users")(lambda row: None)
    with pytest.raises(ValueError, match="users"):
        reg.row("users")(lambda row: None)
    with pytest.raises(ValueError, match="users"):
        reg.batch("users")(lambda rows: None)
    reg.task("t")(lambda p: None)
    with pytest.raises(ValueError, match="'t'"):
        reg.task("t")(lambda p: None)
    with pytest.raises(ValueError, match="jobs"):
        reg.row(JOBS_SOURCE)(lambda row: None)  # the tasks already route the jobs source


def test_task_after_custom_jobs_handler_rejected() -> None:
    reg = Registry()
    reg.row(JOBS_SOURCE)(lambda row: None)
    with pytest.raises(ValueError, match="jobs"):
        reg.task("send")(lambda p: None)


@pytest.mark.parametrize("bad", ["a b", "x`y", "1a", "", "status; DROP TABLE t"])
def test_handler_columns_are_validated_at_registration(bad: str) -> None:
    reg = Registry()
    with pytest.raises(ValueError, match="not an allowed SQL identifier"):
        reg.row("users", columns=["ok", bad])
    with pytest.raises(ValueError, match="not an allowed SQL identifier"):
        reg.batch("users", columns=[bad])
    assert reg.sources == []


def test_unknown_source_handler_lookup() -> None:
    with pytest.raises(KeyError, match="nope"):
        Registry().handler("nope")


# --- Handler.run: row handlers ----------------------------------------------------------------------


def test_row_handler_outcome_per_row() -> None:
    def fn(row: Row) -> Ack | None:
        if row["id"] == 3:
            raise RuntimeError("boom on 3")
        if row["id"] == 4:
            return Ack.delete()
        return None

    out = Handler("s", fn, batch=False).run(ROWS)
    assert len(out) == len(ROWS)
    assert isinstance(out[2], RuntimeError)
    assert str(out[2]) == "boom on 3"
    assert out[3] == Ack.delete()
    assert [out[i] for i in (0, 1, 4)] == [Ack.default()] * 3


def test_row_handler_sees_each_row_once_in_order() -> None:
    seen: list[int] = []
    Handler("s", lambda row: seen.append(row["id"]), batch=False).run(ROWS)
    assert seen == [1, 2, 3, 4, 5]


@pytest.mark.parametrize("bad", [True, 0, "delete", {"action": "delete"}, [Ack.delete()]], ids=repr)
def test_row_handler_non_ack_return_is_a_type_error_outcome(bad: object) -> None:
    out = Handler("s", lambda row: bad if row["id"] == 2 else None, batch=False).run(ROWS[:3])
    assert isinstance(out[1], TypeError)
    assert out[0] == out[2] == Ack.default()


@pytest.mark.parametrize("kind", [SystemExit, KeyboardInterrupt, GeneratorExit], ids=lambda k: k.__name__)
def test_a_base_exception_from_user_code_is_that_rows_failure(kind: type[BaseException]) -> None:
    """argparse or sys.exit() in a library: the row's failure (retried per policy), never an exception
    out of Handler.run that would end the handler thread and strand its batch-mates (issue 25, item 7).
    The worker stops on SIGTERM/SIGINT through its stop event, never through KeyboardInterrupt."""

    def fn(row: Row) -> None:
        if row["id"] == 2:
            raise kind

    out = Handler("s", fn, batch=False).run(ROWS[:3])
    assert isinstance(out[1], kind)
    assert out[0] == out[2] == Ack.default()

    def batch(rows: list[Row]) -> None:
        raise kind

    assert all(isinstance(o, kind) for o in Handler("s", batch, batch=True).run(ROWS[:3]))

    def generated(rows: list[Row]) -> Iterator[Ack]:
        yield Ack.default()
        raise kind

    assert all(isinstance(o, kind) for o in Handler("s", generated, batch=True).run(ROWS[:3]))


def test_an_async_batch_handler_fails_its_call_on_a_base_exception_but_not_on_its_cancellation() -> None:
    async def exits(rows: list[Row]) -> None:
        raise SystemExit(2)

    out = arun(Handler("s", None, batch=True, afn=exits).run_batch(ROWS[:2]))
    assert [type(o) for o in out] == [SystemExit, SystemExit]

    async def cancelled(rows: list[Row]) -> None:
        raise asyncio.CancelledError  # the worker's own time limit: passes through, as a time-out

    with pytest.raises(asyncio.CancelledError):
        arun(Handler("s", None, batch=True, afn=cancelled).run_batch(ROWS[:2]))


def test_run_on_no_rows() -> None:
    assert Handler("s", lambda row: None, batch=False).run([]) == []
    assert Handler("s", lambda rows: None, batch=True).run([]) == []


# --- Handler.run: batch handlers --------------------------------------------------------------------


def test_batch_handler_gets_all_rows_in_one_call() -> None:
    calls: list[list[int]] = []

    def fn(rows: list[Row]) -> list[Ack | None]:
        calls.append([r["id"] for r in rows])
        return [Ack.touch(r["id"]) if r["id"] % 2 else None for r in rows]

    out = Handler("s", fn, batch=True).run(ROWS)
    assert calls == [[1, 2, 3, 4, 5]]
    assert out == [Ack.touch(1), Ack.default(), Ack.touch(3), Ack.default(), Ack.touch(5)]


def test_batch_handler_returning_none_means_default_for_all() -> None:
    assert Handler("s", lambda rows: None, batch=True).run(ROWS) == [Ack.default()] * 5


def test_batch_handler_may_return_any_iterable() -> None:
    out = Handler("s", lambda rows: (Ack.delete() for _ in rows), batch=True).run(ROWS)
    assert out == [Ack.delete()] * 5


@pytest.mark.parametrize("n", [0, 4, 6])
def test_batch_handler_wrong_length_fails_every_row(n: int) -> None:
    out = Handler("s", lambda rows: [Ack.delete()] * n, batch=True).run(ROWS)
    assert len(out) == 5
    assert all(isinstance(o, ValueError) for o in out)
    assert f"returned {n} acks for 5 rows" in str(out[0])


def test_batch_handler_exception_fails_every_row() -> None:
    def fn(rows: list[Row]) -> None:
        raise ConnectionError("api down")

    out = Handler("s", fn, batch=True).run(ROWS)
    assert len(out) == 5
    assert all(isinstance(o, ConnectionError) for o in out)


def test_batch_handler_non_ack_element_is_that_rows_type_error_outcome() -> None:
    out = Handler("s", lambda rows: [Ack.delete(), "oops", None], batch=True).run(ROWS[:3])
    assert out[0] == Ack.delete()
    assert isinstance(out[1], TypeError)
    assert out[2] == Ack.default()


def test_batch_handler_non_sequence_return_fails_every_row() -> None:
    out = Handler("s", lambda rows: Ack.delete(), batch=True).run(ROWS[:2])
    assert len(out) == 2
    assert all(isinstance(o, TypeError) for o in out)
