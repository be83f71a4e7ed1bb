"""shared/process/logs.py: JSON lines with stable event names, context fields and tracebacks; the human
default."""

from __future__ import annotations

import json
import logging
import os
import sys

import pytest

from duecast.shared.process import logs
from duecast.shared.process.logs import HUMAN_FORMAT, JsonFormatter, event_name, process_id


def record(msg: str, *args: object, name: str = "duecast.sweeper", **extra: object) -> logging.LogRecord:
    rec = logging.LogRecord(name, logging.WARNING, __file__, 1, msg, args, None)
    rec.__dict__.update(extra)
    return rec


def test_an_explicit_event_wins() -> None:
    assert event_name(record("requeued %d rows", 3, event="sweeper.requeued")) == "sweeper.requeued"


def test_a_derived_event_comes_from_the_template_so_it_does_not_change_with_the_arguments() -> None:
    one = event_name(record("requeued %d rows of %s not acked", 3, "a"))
    two = event_name(record("requeued %d rows of %s not acked", 70, "b"))
    assert one == two == "sweeper.requeued_rows_of_not"
    assert event_name(record("%s", "x", name="other")) == "other.message"


def test_a_json_line_has_the_fixed_fields_and_the_calls_extras() -> None:
    line = JsonFormatter().format(
        record(
            "handler failed for %s id=%s",
            "jobs.default",
            42,
            name="duecast.worker",
            event="worker.handler_failed",
            source="jobs.default",
            job_id=42,
            task="send_welcome",
        )
    )
    doc = json.loads(line)
    assert doc["event"] == "worker.handler_failed"
    assert doc["message"] == "handler failed for jobs.default id=42"
    assert (doc["level"], doc["logger"]) == ("warning", "duecast.worker")
    assert (doc["source"], doc["job_id"], doc["task"]) == ("jobs.default", 42, "send_welcome")
    assert doc["process"] == process_id()
    assert doc["process"].endswith(f":{os.getpid()}")
    assert doc["ts"].endswith("+00:00")
    assert "args" not in doc
    assert "msg" not in doc


def test_an_exception_is_one_field_of_one_line() -> None:
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        rec = logging.LogRecord("duecast.loop", logging.ERROR, __file__, 1, "tick failed", (), sys.exc_info())
    line = JsonFormatter().format(rec)
    assert "\n" not in line
    assert "RuntimeError: boom" in json.loads(line)["exception"]


def test_values_json_cannot_encode_become_text() -> None:
    doc = json.loads(JsonFormatter().format(record("x", when=object(), ids=[1, 2])))
    assert doc["ids"] == [1, 2]
    assert doc["when"].startswith("<object object")


def test_the_human_format_is_unchanged() -> None:
    assert HUMAN_FORMAT == "%(asctime)s %(levelname)s %(name)s[%(process)d] %(message)s"


@pytest.mark.parametrize(("level", "apscheduler"), [("INFO", logging.WARNING), ("DEBUG", logging.DEBUG)])
def test_apscheduler_chatter_is_quiet_unless_debugging(level: str, apscheduler: int) -> None:
    before = logging.getLogger("apscheduler").level
    try:
        logs.setup(level)
        assert logging.getLogger("apscheduler").getEffectiveLevel() == apscheduler
        assert not logging.getLogger("apscheduler.scheduler").isEnabledFor(logging.INFO) or level == "DEBUG"
    finally:
        logging.getLogger("apscheduler").setLevel(before)
