"""shared/process/logs.py's RepeatFilter: one line per cause per interval, with the count of the rest.

The acceptance case: a downstream service failing every call for 10 minutes keeps a worker's log
under 1 MB. Time is a fake clock moved by the test; nothing sleeps.
"""

from __future__ import annotations

import io
import json
import logging
import re
from dataclasses import dataclass
from typing import Any

import pytest

from duecast.shared.acks import Row
from duecast.shared.process.logs import HUMAN_FORMAT, JsonFormatter, RepeatFilter
from duecast.worker import report


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@dataclass
class Captured:
    clock: Clock
    stream: io.StringIO
    log: logging.Logger
    filter: RepeatFilter

    def lines(self) -> list[str]:
        return [line for line in self.stream.getvalue().splitlines() if line.strip()]


@pytest.fixture
def captured(monkeypatch: pytest.MonkeyPatch) -> Captured:
    """The worker's logger writing through a rate-limited handler into memory, as setup() wires it.

    A private Logger (not in logging's registry, where pytest would add its own capturing handlers
    and format every dropped-or-not record), swapped in for the worker's.
    """
    clock, stream = Clock(), io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter(HUMAN_FORMAT))
    repeat = RepeatFilter(clock=clock)
    handler.addFilter(repeat)
    log = logging.Logger("duecast.worker", logging.INFO)
    log.addHandler(handler)
    log.propagate = False
    monkeypatch.setattr(report, "log", log)
    return Captured(clock, stream, log, repeat)


def failure(message: str, kind: type[Exception] = ConnectionError) -> Exception:
    """An exception with a real traceback a few frames deep, like a handler's call to a service."""

    def call_service(depth: int) -> None:
        if depth == 0:
            raise kind(message)
        call_service(depth - 1)

    try:
        call_service(8)
    except Exception as exc:
        return exc
    raise AssertionError("unreachable")


def test_a_repeated_cause_logs_twice_per_interval_then_says_how_many_it_dropped(captured: Captured) -> None:
    for i in range(5):
        captured.log.error("handler failed for %s id=%s", "orders", i)
        captured.clock.now += 1
    assert [line.split("] ")[1] for line in captured.lines()] == [
        "handler failed for orders id=0",
        "handler failed for orders id=1",
    ]
    captured.clock.now += 6  # 11 s after the first line: a new interval
    captured.log.error("handler failed for %s id=%s", "orders", 99)
    assert len(captured.lines()) == 3
    assert captured.lines()[-1].endswith("handler failed for orders id=99 (3 more like this in 10 s)")


def test_with_a_burst_of_one_a_cause_writes_one_line_per_interval(captured: Captured) -> None:
    repeat = RepeatFilter(clock=captured.clock, burst=1)
    rec = [
        logging.LogRecord("duecast.worker", logging.ERROR, __file__, 1, "failed %s", (i,), None)
        for i in range(4)
    ]
    assert [repeat.filter(r) for r in rec] == [True, False, False, False]


def test_causes_are_told_apart_by_logger_template_and_exception_type() -> None:
    repeat = RepeatFilter(clock=Clock())

    def passes(name: str, template: str, exc: Exception | None = None) -> bool:
        info = None if exc is None else (type(exc), exc, exc.__traceback__)
        return repeat.filter(logging.LogRecord(name, logging.ERROR, __file__, 1, template, ("a", 1), info))

    assert passes("duecast.worker", "handler failed for %s id=%s", failure("x", ConnectionError))
    assert passes("duecast.worker", "handler failed for %s id=%s", failure("y", TimeoutError))
    assert passes("duecast.worker", "handler failed for %s id=%s")
    assert passes("duecast.worker", "invalid ack for %s id=%s", failure("x", ConnectionError))
    assert passes("duecast.dispatcher", "handler failed for %s id=%s", failure("x", ConnectionError))
    # ...and the same cause again, with other arguments and another message, within its interval:
    assert passes("duecast.worker", "handler failed for %s id=%s", failure("other text", ConnectionError))
    assert not passes("duecast.worker", "handler failed for %s id=%s", failure("a third", ConnectionError))


def test_a_template_that_starts_with_its_subject_keys_on_it_too() -> None:
    """`%s hit %s; retrying ...` is every retried unit's template: one unit's retries hide no other's."""
    repeat = RepeatFilter(clock=Clock(), burst=1)

    def retry(what: str) -> bool:
        args = (what, "Lock wait timeout", "", "retry 1", 0.05)
        template = "%s hit %s; retrying %s(%s) in %.2fs"
        return repeat.filter(
            logging.LogRecord("duecast.worker", logging.WARNING, __file__, 1, template, args, None)
        )

    assert retry("start of a batch of users")
    assert retry("finishing rows of new_users")
    assert not retry("start of a batch of users")


class ServerError(Exception):
    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


def test_an_error_among_the_arguments_is_part_of_the_cause_with_its_server_code() -> None:
    """A lost session (2013) and a deadlock (1213) retried by one unit are two causes."""
    repeat = RepeatFilter(clock=Clock(), burst=1)

    def retry(exc: Exception) -> bool:
        args = ("start of a batch of users", exc, "", "retry 1", 0.05)
        template = "%s hit %s; retrying %s(%s) in %.2fs"
        return repeat.filter(
            logging.LogRecord("duecast.worker", logging.WARNING, __file__, 1, template, args, None)
        )

    assert retry(ServerError("(2013, 'Lost connection')", 2013))
    assert not retry(ServerError("(2013, 'Lost connection again')", 2013))
    assert retry(ServerError("(1213, 'Deadlock found')", 1213))
    assert retry(TimeoutError("no code"))


def test_info_and_debug_lines_are_never_dropped(captured: Captured) -> None:
    for i in range(20):
        captured.log.info("claimed %d rows", i)
    assert len(captured.lines()) == 20


def test_a_counted_line_keeps_its_event_name_and_carries_the_count_as_a_field() -> None:
    clock = Clock()
    repeat = RepeatFilter(clock=clock)

    def rec(i: int) -> logging.LogRecord:
        return logging.LogRecord(
            "duecast.worker", logging.ERROR, __file__, 1, "handler failed for %s id=%s", ("orders", i), None
        )

    assert repeat.filter(rec(1))
    assert repeat.filter(rec(2))
    assert not repeat.filter(rec(3))
    assert not repeat.filter(rec(4))
    clock.now += 10
    counted = rec(5)
    assert repeat.filter(counted)
    doc = json.loads(JsonFormatter().format(counted))
    assert doc["event"] == "worker.handler_failed_for_id"
    assert doc["repeated"] == 2
    assert doc["message"] == "handler failed for orders id=5 (2 more like this in 10 s)"


@pytest.mark.parametrize("step_s", [0.001, 0.05])
def test_many_causes_do_not_grow_the_memory_without_bound(step_s: float) -> None:
    """Thousands of distinct messages (an f-string template per row id) within or across intervals."""
    clock = Clock()
    repeat = RepeatFilter(clock=clock)
    for i in range(5000):
        clock.now += step_s
        record = logging.LogRecord("duecast.x", logging.WARNING, __file__, 1, f"cause {i}", (), None)
        assert repeat.filter(record)  # each is a new cause: its first line is always written
        assert len(repeat._causes) <= 1000  # the bound is the point of the test


class FakeStore:
    id_column = "id"


class FakeFlight:
    source = "orders"
    store = FakeStore()


def test_a_downstream_failing_every_call_for_10_minutes_writes_under_1_mb(captured: Captured) -> None:
    """A worker acking 20 batches of 100 rows a second, every row failing with the same error and
    traceback, for 600 simulated seconds: 1.2 million failures reported through the worker's own
    log_failures (5 tracebacks and a count line per ack). The error carries a 2 KB response body,
    as an HTTP client's often does, so each line shown is ~5 KB."""
    flight: Any = FakeFlight()
    acks_per_s, rows_per_ack, seconds = 20, 100, 600
    body = "<html><body>502 Bad Gateway " + "upstream payments:443 refused the connection; " * 40
    one_ack: list[tuple[Row, Any]] = [({"id": i}, failure(body[:2000])) for i in range(rows_per_ack)]
    for _ in range(seconds * acks_per_s):
        report.log_failures(flight, one_ack, 0)
        captured.clock.now += 1 / acks_per_s
    written = len(captured.stream.getvalue().encode())
    lines = captured.lines()
    tracebacks = sum(1 for line in lines if "handler failed for orders" in line)
    assert written < 1_000_000, f"{written:,} bytes in 10 minutes"
    assert 118 <= tracebacks <= 122  # two per 10 s interval
    # Each interval's first line counts the lines dropped in the one before (200 acks x 5, less the
    # two shown): every failure is shown or counted, bar those of the last, unfinished interval.
    counts = [
        int(m.group(1).replace(",", ""))
        for line in lines
        if "handler failed for orders" in line
        and (m := re.search(r"\(([0-9,]+) more like this in 10 s\)", line))
    ]
    assert len(counts) == tracebacks // 2 - 1
    assert all(985 <= n <= 1010 for n in counts)
    failures = seconds * acks_per_s * report.LOGGED_PER_ACK
    assert failures - 1010 <= tracebacks + sum(counts) <= failures
    # Without the filter, the same 10 minutes would have written far more than 1 MB.
    one_line = len(
        logging.Formatter(HUMAN_FORMAT)
        .format(
            logging.LogRecord(
                "duecast.worker",
                logging.ERROR,
                __file__,
                1,
                "handler failed for %s id=%s: %r",
                ("orders", 1, one_ack[0][1]),
                (ConnectionError, one_ack[0][1], one_ack[0][1].__traceback__),
            )
        )
        .encode()
    )
    assert one_line > 4000  # the lines this test writes are not small ones
    assert one_line * 5 * acks_per_s * seconds > 100 * 1_000_000
