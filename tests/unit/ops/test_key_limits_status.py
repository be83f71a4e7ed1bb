"""`duecast status`'s concurrency keys (cli/status_limits.py): per key-limited queue its busiest keys'
jobs in flight against max_running_per_key, and its keys in flight and pending; split to fit an
80-column terminal (queue and key repeated), never cut; the same in --json and on a queue's dashboard page."""

from __future__ import annotations

import io

from flask import render_template
from rich.console import Console

from duecast.cli.history import History
from duecast.cli.status import Frame, as_json
from duecast.cli.status_limits import key_limits_table
from duecast.cli.status_view import fit
from duecast.cli.web import pages
from duecast.cli.web.app import create_app
from duecast.cli.web.context import WebContext
from duecast.shared.monitor.status import SourceSnapshot
from duecast.shared.settings import Settings
from duecast.shared.storage.key_status import KeyLimitState
from duecast.shared.storage.source_store import SourceStatus

STATES = [
    KeyLimitState("default", 3, [("acct-a", 3), ("acct-b", 1)], 2, 1_000, pending_capped=True),
    KeyLimitState("reports", 10, [], keys_in_flight=0, keys_pending=0),
]


def printed(width: int, states: list[KeyLimitState]) -> str:
    out = io.StringIO()
    console = Console(file=out, width=width, color_system=None, legacy_windows=False)
    table = key_limits_table(states)
    assert table is not None
    for part in fit(table, console):
        console.print(part)
    return out.getvalue()


def test_each_busy_key_shows_its_jobs_in_flight_against_the_limit() -> None:
    text = printed(200, STATES)
    rows = [line.split() for line in text.splitlines() if "acct-" in line or "reports" in line]
    assert next(r for r in rows if "acct-a" in r)[:6] == ["│", "default", "│", "acct-a", "│", "3/3"]
    assert "1,000+" in text  # keys of the first JOBS_READ pending jobs only: said, not hidden
    reports = next(r for r in rows if "reports" in r)
    assert reports[:6] == ["│", "reports", "│", "-", "│", "0/10"]  # no key in flight: its limit still shown
    assert key_limits_table([]) is None  # no key limit: no table


def test_on_80_columns_the_table_is_split_with_queue_and_key_in_each_part_never_cut() -> None:
    long_key = "tenant-" + "x" * 40
    text = printed(80, [KeyLimitState("default", 3, [(long_key, 2)], 1, 5)])
    assert "…" not in text
    assert all(len(line) <= 80 for line in text.splitlines())
    parts = text.count("concurrency keys (")
    assert parts >= 2
    assert text.count(long_key) == text.count("default") == parts  # every part names its rows


def test_json_gives_each_key_and_the_counts_as_numbers() -> None:
    doc = as_json(Frame(key_limits=STATES[:1]), History(maxlen=2))
    assert doc["key_limits"] == [
        {
            "queue": "default",
            "max_running_per_key": 3,
            "busiest": [{"key": "acct-a", "in_flight": 3}, {"key": "acct-b", "in_flight": 1}],
            "keys_in_flight": 2,
            "keys_pending": 1_000,
            "keys_pending_capped": True,
            "partial": False,
        }
    ]
    assert as_json(Frame(), History(maxlen=2))["key_limits"] is None  # not read: unknown


def test_a_queues_dashboard_page_shows_its_busiest_keys_escaped() -> None:
    row = pages.SourceRow(
        SourceSnapshot("jobs.default", SourceStatus(5, 3, 2.0, unit="jobs"), 0, {}, None), "jobs", {}, 1.0
    )
    state = KeyLimitState("default", 3, [("<b>acct-a</b>", 3)], 1, 1_000, pending_capped=True)
    with create_app(WebContext(Settings(), History(maxlen=10), [])).test_request_context("/"):
        page = render_template(
            "source.html", row=row, queue="default", charts={}, keys=state, limit=None, can_act=False
        )
    assert "max_running_per_key 3" in page
    assert "1 key(s) with jobs in flight, 1,000+ with pending jobs" in page
    assert "&lt;b&gt;acct-a&lt;/b&gt;</span> 3/3" in page  # an enqueuer's key is text, never markup
