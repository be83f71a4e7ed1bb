"""`duecast jobs show` and `duecast topics show` print what is recorded as it is: a traceback's file paths
whole at 80 columns, `-` (never `None`) for what is not recorded, and data that looks like markup as text.
"""

from __future__ import annotations

import datetime as dt
import io
from typing import Any

from rich.console import Console

from duecast.cli import jobs, topics
from duecast.shared.states import State

LONG_PATH = "/home/someone/projects/a-rather-long-application-name/src/app/integrations/payments/client.py"
TRACEBACK = f"""Traceback (most recent call last):
  File "{LONG_PATH}", line 412, in charge
    response = self._session.post(url, json=body, timeout=self.timeout_s)
ConnectionError: payments [eu-west] refused the connection
"""


def console() -> tuple[Console, io.StringIO]:
    out = io.StringIO()
    return Console(file=out, width=80, color_system=None, legacy_windows=False), out


class FakeAdmin:
    def __init__(self, job: dict[str, Any] | None) -> None:
        self.job = job

    def show(self, job_id: int) -> dict[str, Any] | None:
        return None if self.job is None else dict(self.job)


def a_dead_job() -> dict[str, Any]:
    at = dt.datetime(2026, 11, 27, 10, 0, 0, 123456)
    return {
        "id": 7,
        "queue": "default",
        "task": "charge",
        "dc_state": int(State.DEAD),
        "payload": '{"order": "[bold]A-1[/]"}',
        "run_at": at,
        "created_at": at,
        "errors": 3,
        "started_at": at,
        "finished_at": at,
        "worker": "vm:8471",
        "unique_key": None,
        "last_error": TRACEBACK,
    }


def test_jobs_show_prints_the_traceback_with_its_paths_whole_at_80_columns() -> None:
    con, out = console()
    assert jobs._show(con, FakeAdmin(a_dead_job()), 7) == 0  # type: ignore[arg-type]
    text = out.getvalue()
    assert LONG_PATH in text  # not cut to the column, nor folded mid-path
    assert "ConnectionError: payments [eu-west] refused the connection" in text  # not taken for markup
    assert '"[bold]A-1[/]"' in text.replace("\n", "").replace(" │", "").replace("│ ", "")
    assert "None" not in text
    assert "dead" in text
    assert "unique_key" in text
    assert " - " in text


def test_topics_show_prints_a_dash_for_what_is_not_recorded_never_none() -> None:
    at = dt.datetime(2026, 11, 27, 10, 0, 0)
    trace = {
        "attempts": [
            {
                "attempt": 1,
                "outcome": "failed",
                "dispatched_at": at,
                "started_at": None,
                "ended_at": at,
                "worker": None,
                "error": "boom",
            }
        ],
        "delivery": {
            "dc_attempt": 2,
            "dc_state": int(State.DISPATCHED),
            "replays": 0,
            "dc_dispatched_at": at,
            "started_at": None,
            "finished_at": None,
            "worker": None,
            "last_error": None,
        },
        "read_by": [],
    }
    con, out = console()
    con.print(topics._trace_table("billing", trace))
    con.print(topics._messages([{"seq": 1, "msg_key": None, "created_at": at, "payload": "{}"}], "m"))
    text = out.getvalue()
    assert "None" not in text
    assert "dispatched" in text
    assert " - " in text
