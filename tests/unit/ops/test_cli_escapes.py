"""Every command prints enqueuer- and handler-controlled text (task, queue, topic, group and worker
names, keys, payloads, errors) through cli.formats.shown: no escape sequence reaches the operator's
terminal and no markup is rendered (issue 25.9)."""

from __future__ import annotations

import datetime as dt
import io
import re
from typing import Any

from rich.console import Console

from duecast.cli import formats, jobs, status_view, topics
from duecast.shared.states import State
from duecast.shared.storage.worker_registry import LiveWorker

RETITLE = "\x1b]0;you have been pwned\x07"  # OSC 0: sets the terminal's title
LINK = "[link=https://evil.example]refund[/link]"  # rich markup: a hyperlink in place of the name
HOSTILE = f"charge{RETITLE}{LINK}\x9b31m\u202egnp.exe"


def terminal() -> tuple[Console, io.StringIO]:
    """A console that renders as for a real terminal (colours, hyperlinks), into a string."""
    out = io.StringIO()
    return Console(file=out, width=300, force_terminal=True, color_system="truecolor"), out


def assert_safe(text: str) -> None:
    plain = re.sub(r"\x1b\[[0-9;]*m", "", text)  # rich's own SGR colour codes are fine...
    assert "\x1b" not in plain  # ...but nothing else: no title, no hyperlink (OSC 8), no CSI
    assert "\x1b]" not in text
    assert "\x07" not in text
    assert "\x9b" not in text
    assert "\u202e" not in text
    assert "\\x1b]0;you have been pwned\\x07" in plain
    assert LINK in plain  # shown as the text it is


def a_job(**over: Any) -> dict[str, Any]:
    at = dt.datetime(2026, 11, 27, 10, 0, 0)
    job = {
        "id": 7,
        "queue": "default",
        "task": HOSTILE,
        "dc_state": int(State.DEAD),
        "payload": f'{{"x": "{LINK}"}}',
        "run_at": at,
        "created_at": at,
        "errors": 3,
        "max_attempts": 3,
        "last_error": f"Traceback\n  boom\nValueError: {HOSTILE}",
    }
    return {**job, **over}


def test_jobs_list_escapes_task_queue_and_error() -> None:
    con, out = terminal()
    jobs.print_jobs(con, [a_job(), a_job(id=8, queue=f"q{RETITLE}")])
    assert_safe(out.getvalue())


def test_jobs_list_title_escapes_a_shared_queue() -> None:
    con, out = terminal()
    jobs.print_jobs(con, [a_job(queue=f"q{RETITLE}{LINK}")])
    assert_safe(out.getvalue())


def test_jobs_show_escapes_every_field_and_the_traceback() -> None:
    class Admin:
        def show(self, job_id: int) -> dict[str, Any]:
            return a_job()

    con, out = terminal()
    assert jobs._show(con, Admin(), 7) == 0  # type: ignore[arg-type]
    text = out.getvalue()
    assert_safe(text)
    assert "Traceback\n" in text  # a traceback keeps its lines


def test_topics_tables_escape_keys_payloads_groups_and_workers() -> None:
    at = dt.datetime(2026, 11, 27, 10, 0, 0)
    trace = {
        "attempts": [
            {
                "attempt": 1,
                "outcome": "failed",
                "dispatched_at": at,
                "started_at": at,
                "ended_at": at,
                "worker": HOSTILE,
                "error": HOSTILE,
            }
        ],
        "delivery": None,
        "read_by": [],
    }
    con, out = terminal()
    con.print(topics._trace_table(HOSTILE, trace))
    con.print(topics._messages([{"seq": 1, "msg_key": HOSTILE, "created_at": at, "payload": LINK}], HOSTILE))
    assert_safe(out.getvalue())


def test_status_worker_tables_escape_registry_names() -> None:
    """The worker account writes its registry row: its name and sources are not the operator's."""
    started = dt.datetime(2026, 11, 27)
    live = LiveWorker(name=HOSTILE, host="h", pid=1, sources=HOSTILE, started_at=started, silent_s=1.0)
    con, out = terminal()
    con.print(status_view.live_worker_table([live]))
    assert_safe(out.getvalue())


def test_plain_text_for_print_escapes_controls_but_keeps_lines_when_asked() -> None:
    assert formats.plain("a\x1bb\nc") == "a\\x1bb\\x0ac"
    assert formats.plain("a\x1bb\nc\td", lines=True) == "a\\x1bb\nc\td"
    assert formats.plain("\ud800\u2028") == "\\ud800\\u2028"
