"""The demo's numbers read right in both modes: range mode by default, freshness and staleness from
the freshness measure, no lag in years or below zero, rates that are not a burst's median."""

from __future__ import annotations

from pathlib import Path

import pytest
from rich.console import Console
from rich.table import Table

from duecast.cli.demo import run as demo
from duecast.cli.demo.run import Run, Sample
from duecast.cli.demo.view import live_table, summary
from duecast.shared.monitor.freshness import Freshness
from duecast.shared.monitor.status import SourceSnapshot
from duecast.shared.settings import Settings
from duecast.shared.storage.source_store import SourceStatus

NEVER_CHECKED_AGE_S = 848_922_555.17  # what range mode's oldest due age was at second 1


def sample(
    t: float, acked: int, age_s: float | None, fresh: Freshness | None, unit: str = "ranges"
) -> Sample:
    status = SourceStatus(due=0, in_flight=0, oldest_due_age_s=age_s, unit=unit)
    return Sample(t, acked, SourceSnapshot("user_block_status", status, 0, {"acked": acked}, fresh))


def cells(table: Table) -> dict[str, str]:
    what, value = table.columns
    return dict(zip(what.cells, value.cells, strict=True))  # type: ignore[arg-type]


def test_range_mode_at_second_one_says_never_instead_of_years() -> None:
    run = Run(users=100_000, workers=3)
    run.samples.append(sample(0.0, 0, NEVER_CHECKED_AGE_S, Freshness(NEVER_CHECKED_AGE_S + 10, 0.0)))

    shown = cells(live_table(run, alive=4, started=4, elapsed=1))

    assert shown["mode (--mode)"] == "ranges"
    assert shown["worst staleness (now - oldest last check)"] == "never"
    assert shown["lag (how long the oldest due has waited)"] == "never checked"
    assert shown["checked within period + 1s"] == "0.0%"


def test_row_mode_shows_freshness_too() -> None:
    run = Run(users=100_000, workers=3, mode="rows")
    run.samples.append(sample(0.0, 0, -0.4, Freshness(9.6, 0.995), unit="rows"))

    shown = cells(live_table(run, alive=4, started=4, elapsed=12))

    assert shown["checked within period + 1s"] == "99.5%"
    assert shown["worst staleness (now - oldest last check)"] == "9.6s"
    assert shown["lag (how long the oldest due has waited)"] == "0.00s"  # due in 0.4 s: no lag


def test_the_summary_of_a_bursty_range_run_reads_right() -> None:
    run = Run(users=100_000, workers=3, period_s=10)
    # Range mode checks everyone in the first second of each period, then waits: 19 of 20 seconds
    # check nothing, and every oldest due age is negative (the next due is in the future).
    acked = 0
    for second in range(31):
        acked += 100_000 if second % 10 == 0 else 0
        run.samples.append(sample(float(second), acked, -0.99, Freshness(9.0 + second % 10 / 10, 1.0)))
    run.exit_codes = {"dispatcher": 0}

    shown = cells(summary(run))

    assert shown["checks/s (mean over the run)"] == "10,000"  # 300,000 checks over 30 s, not a median 0
    assert shown["worst lag after the first pass"] == "0.00s"  # never negative
    assert shown["worst staleness after the first pass"] == "9.90s"
    assert shown["checked within period (10s) + 1s, after the first pass"] == "lowest 100.0%, median 100.0%"
    assert shown["users / worker processes / mode"] == "100,000 / 3 / ranges"


def test_the_demo_runs_range_mode_unless_told_otherwise(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    modes: list[str] = []

    def fake_run(settings: Settings, *_args: object, **_kwargs: object) -> Run:
        modes.append(settings.sources[0].mode)
        return Run(users=1, workers=1, log_dir=tmp_path)

    monkeypatch.setattr(demo, "run", fake_run)
    monkeypatch.setattr(demo, "Console", lambda: Console(file=open("/dev/null", "w")))  # noqa: SIM115

    assert demo.main(["--users", "1"]) == 0
    assert demo.main(["--users", "1", "--mode", "rows"]) == 0
    assert modes == ["ranges", "rows"]


def test_before_the_first_pass_reaches_every_user_the_share_says_how_far_it_got() -> None:
    """Range mode at 3 s: 61,999 of 100,000 users checked, each within its period; not `100.0%`."""
    run = Run(users=100_000, workers=3)
    reached = Freshness(NEVER_CHECKED_AGE_S + 10, 0.62, True, first_pass=0.62)
    run.samples.append(sample(0.0, 61_999, NEVER_CHECKED_AGE_S, reached))
    shown = cells(live_table(run, alive=4, started=4, elapsed=3))
    assert shown["checked within period + 1s"] == "first pass 62%"
    assert shown["worst staleness (now - oldest last check)"] == "never"
    late = sample(run.period_s + 5, 99_000, NEVER_CHECKED_AGE_S, reached)
    run.samples.append(late)
    assert late not in run.steady_samples()  # the summary's "after the first pass" waits for it
