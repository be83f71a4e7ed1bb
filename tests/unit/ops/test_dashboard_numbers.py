"""Numbers on screen mean what they say: freshness before the first pass ends, the lag axis, the colours
and units of the throughput charts, and the `≈` note only under estimated counts. Numbers, SVG and the
rendered pages, without servers.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from flask import Flask, render_template

from duecast.cli import formats, status_view
from duecast.cli.history import History, Reading
from duecast.cli.web import pages
from duecast.cli.web.app import create_app
from duecast.cli.web.context import WebContext
from duecast.shared.monitor.freshness import Freshness, counting_unreached
from duecast.shared.monitor.status import SourceSnapshot
from duecast.shared.settings import Settings
from duecast.shared.storage.source_store import SourceStatus

NEVER = 26 * 365 * 86400.0  # a range discovered and never checked: due since 2000-01-01


def snap(
    name: str,
    acked: int,
    *,
    failed: int = 0,
    claimed: int = 0,
    age: float | None = 2.0,
    fresh: Freshness | None = None,
    unit: str = "rows",
) -> SourceSnapshot:
    counters = {"acked": acked, "failed": failed, "claimed": claimed}
    return SourceSnapshot(name, SourceStatus(5, 3, age, unit=unit), 0, counters, fresh)


def history_of(*readings: tuple[float, SourceSnapshot]) -> History:
    history = History(maxlen=100)
    for at, s in readings:
        history.add(Reading(at, (s,)))
    return history


# ---------------------------------------------------------------- freshness before the first pass


def test_the_first_pass_shows_its_progress_never_100_percent() -> None:
    assert formats.share(Freshness(NEVER, 0.62, True, first_pass=0.62)) == "first pass 62%"
    assert formats.share(Freshness(NEVER, 0.999, True, first_pass=0.9999)) == "first pass 99%"
    assert formats.share(Freshness(NEVER, None, True, first_pass=0.0)) == "first pass 0%"
    assert formats.share(Freshness(3.0, 1.0, True)) == "100.0%"  # done: the share itself
    assert formats.share(Freshness(3.0, 0.5, False)) == "≈50.0%"


def test_unreached_ranges_count_as_stale_in_the_share() -> None:
    # 61,999 of 100,000 users reached, all of them within their period: 62%, not 100%.
    assert counting_unreached(1.0, 0.62) == pytest.approx(0.62)
    assert counting_unreached(0.5, 0.5) == pytest.approx(0.25)
    assert counting_unreached(0.9, None) == 0.9  # first pass over: the share as measured
    assert counting_unreached(None, 0.3) is None


def test_only_an_estimated_share_asks_for_the_estimate_note() -> None:
    assert not formats.estimated(
        [Freshness(1.0, 1.0, True), None, Freshness(NEVER, 0.2, True, first_pass=0.2)]
    )
    assert formats.estimated([Freshness(1.0, 1.0, True), Freshness(1.0, 0.9, False)])
    assert not formats.estimated([Freshness(1.0, None, False)])  # no share shown, no note


# ---------------------------------------------------------------- the lag chart


def axis_labels(svg: str) -> list[str]:
    return re.findall(r'class="axis"[^>]*text-anchor="end">([^<]*)<', svg)


def test_a_never_checked_lag_is_not_drawn_and_says_why() -> None:
    h = history_of((100.0, snap("a", 0, age=NEVER)), (101.0, snap("a", 10, age=NEVER)))
    svg = str(pages.source_charts(h, "a", rescan=True, unit="ranges")["lag"])
    assert "never" not in axis_labels(svg)
    assert 'data-points="0"' in svg
    assert "first pass" in svg
    overview = str(pages.overview_charts(h, ["a"])["lag"])
    assert "first pass" in overview


def test_the_lag_axis_is_three_distinct_durations_once_real_lags_come() -> None:
    h = history_of(
        (100.0, snap("a", 0, age=NEVER)), (101.0, snap("a", 10, age=4.0)), (102.0, snap("a", 20, age=7.5))
    )
    labels = axis_labels(str(pages.source_charts(h, "a", rescan=True)["lag"]))
    assert labels[:3] == ["0.0s", "5.0s", "10.0s"]
    assert formats.axis_seconds(NEVER) != "never"
    assert formats.axis_seconds(0.0) == "0.0s"


# ---------------------------------------------------------------- throughput: colours and units


def test_failed_is_drawn_red_and_finished_blue_and_claims_have_their_own_chart() -> None:
    h = history_of(
        (100.0, snap("a", 0, unit="ranges")),
        (101.0, snap("a", 1000, failed=30, claimed=2, unit="ranges")),
        (102.0, snap("a", 2000, failed=60, claimed=4, unit="ranges")),
    )
    charts = {k: str(v) for k, v in pages.source_charts(h, "a", rescan=True, unit="ranges").items()}
    throughput = charts["throughput"]
    assert re.search(r'class="line t-done" data-series="finished"', throughput)
    assert re.search(r'class="line t-failed" data-series="failed"', throughput)
    assert "claimed" not in throughput
    assert "rows per second" in throughput
    assert 'data-series="claimed (ranges)"' in charts["claimed"]
    assert "ranges claimed per second" in charts["claimed"]
    assert "in ranges" in charts["backlog"]


def test_the_tones_are_styled_red_and_blue() -> None:
    text = (Path(pages.__file__).parent / "static" / "style.css").read_text(encoding="utf-8")
    assert ".t-failed { stroke: #c92a2a;" in text  # red
    assert ".t-done { stroke: #1f5fbf;" in text  # the accent blue


def test_a_job_queue_counts_jobs() -> None:
    h = history_of(
        (100.0, snap("jobs.default", 0, unit="jobs")), (101.0, snap("jobs.default", 5, unit="jobs"))
    )
    charts = pages.source_charts(h, "jobs.default", rescan=False, unit="jobs")
    assert "jobs per second" in str(charts["throughput"])
    assert "jobs claimed per second" in str(charts["claimed"])


# ---------------------------------------------------------------- rendered pages


@pytest.fixture
def app() -> Iterator[Flask]:
    flask_app = create_app(WebContext(Settings(), History(maxlen=10), []))
    with flask_app.test_request_context("/"):
        yield flask_app


def rows(*snaps: SourceSnapshot) -> list[pages.SourceRow]:
    return [
        pages.SourceRow(s, "re-scan every 5 s (ranges)", {"acked": 10.0, "failed": 0.0}, 1.0) for s in snaps
    ]


def overview(sources: list[pages.SourceRow]) -> str:
    return render_template(
        "overview.html",
        unserved=[],
        sources=sources,
        queues=[],
        charts={"throughput": "", "lag": ""},
        readings=2,
        **pages.overview_notes(sources),
    )


def test_the_estimate_note_shows_under_estimated_shares_only(app: Flask) -> None:
    exact = overview(rows(snap("a", 1, fresh=Freshness(3.0, 1.0, True))))
    assert "InnoDB" not in exact
    assert "first pass" not in exact
    estimated = overview(rows(snap("a", 1, fresh=Freshness(3.0, 0.97, False))))
    assert "≈: over InnoDB's row estimate" in estimated
    assert "≈97.0%" in estimated


def test_duecast_status_shows_the_estimate_caption_under_estimated_shares_only() -> None:
    history = History(maxlen=10)
    exact = status_view.source_table([snap("a", 1, fresh=Freshness(3.0, 1.0, True))], history)
    assert exact.caption == (
        "fresh: rows checked within period + 1 s, failed checks included; "
        "failing: checks that failed, since the counters began"
    )
    estimated = status_view.source_table([snap("a", 1, fresh=Freshness(3.0, 0.97, False))], history)
    assert "≈: over InnoDB's row estimate" in str(estimated.caption)


def test_a_source_before_its_first_pass_ends_never_reads_100_percent(app: Flask) -> None:
    html = overview(rows(snap("a", 1, age=NEVER, fresh=Freshness(NEVER, 0.62, True, first_pass=0.62))))
    cells = re.findall(r'<td class="num">([^<]*)</td>', html)
    assert "first pass 62%" in cells
    assert "100.0%" not in html
    assert '"first pass": the share of a range-mode source' in html


def test_a_failing_source_shows_its_failures_in_the_warning_colour(app: Flask) -> None:
    (row,) = rows(snap("a", 1))
    failing = pages.SourceRow(row.snap, row.kind, {"acked": 0.0, "failed": 250.0}, 1.0)
    html = overview([failing])
    assert '<td class="num bad">250/s</td>' in html
    assert '<td class="num bad">' not in overview([row])


def test_a_rescan_source_whose_checks_all_fail_reads_failing_beside_fresh(app: Flask) -> None:
    """Issue 26.7: failed checks count as checks in `fresh` (a row's due column is its last check,
    failed or not), so a source failing 100% read 100% fresh and nothing else said so."""
    failing = snap("a", 0, failed=40, fresh=Freshness(3.0, 1.0, True))
    first = pages.SourceRow(failing, "re-scan every 5 s (rows)", {}, 1.0)
    assert first.failing == "100.0%"  # one reading: since the counters began
    html = overview([first])
    assert '<td class="num bad">100.0%</td>' in html
    assert "failing: the share of checks that failed" in html
    later = pages.SourceRow(failing, first.kind, {"acked": 30.0, "failed": 10.0}, 1.0)
    assert later.failing == "25.0%"  # two readings: between them
    healthy = pages.SourceRow(failing, first.kind, {"acked": 30.0, "failed": 0.0}, 1.0)
    assert '<td class="num">0.0%</td>' in overview([healthy])
    table = status_view.source_table([failing], history_of((1.0, failing)))
    headers = [c.header for c in table.columns]
    assert list(table.columns[headers.index("failing")].cells) == ["100.0%"]
    assert list(table.columns[headers.index("fresh")].cells) == ["100.0%"]
