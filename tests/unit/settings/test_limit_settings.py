"""rate_limit_per_s, rate_burst and max_running on sources and job queues: defaults, and every bad
value refused at start-up in one line that names the setting."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from duecast import cli
from duecast.shared.settings import JobsSettings, SourceSettings

USERS: dict[str, Any] = {"name": "users", "table": "users", "due_column": "updated_time", "period_s": 10}


def test_unset_limits_limit_nothing() -> None:
    src = SourceSettings(**USERS)
    assert not src.limited
    assert all(not s.limited for s in JobsSettings().queue_sources())


def test_the_default_burst_is_a_twentieth_of_a_second_and_at_least_two_entries() -> None:
    assert SourceSettings(**USERS, rate_limit_per_s=20_000).burst() == 1000
    assert SourceSettings(**USERS, rate_limit_per_s=15).burst() == 2
    assert SourceSettings(**USERS, rate_limit_per_s=200).burst(unit=1000) == 2000
    assert SourceSettings(**USERS, rate_limit_per_s=200, rate_burst=50).burst() == 50


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("rate_limit_per_s", 0),
        ("rate_limit_per_s", -1),
        ("rate_limit_per_s", math.nan),
        ("rate_limit_per_s", math.inf),
        ("rate_limit_per_s", 1e12),
        ("rate_limit_per_s", "fast"),
        ("max_running", 0),
        ("max_running", -10),
        ("max_running", 10**12),
        ("max_running", 2.5),
    ],
)
def test_bad_limits_are_refused(field: str, value: object) -> None:
    with pytest.raises(ValidationError, match=field):
        SourceSettings(**USERS, **{field: value})


@pytest.mark.parametrize("burst", [0, -1, 0.5, math.nan, math.inf, 1e12])
def test_a_bad_burst_is_refused(burst: float) -> None:
    with pytest.raises(ValidationError, match="rate_burst"):
        SourceSettings(**USERS, rate_limit_per_s=100, rate_burst=burst)


def test_a_burst_without_a_rate_is_refused() -> None:
    with pytest.raises(ValidationError, match="rate_burst is set without rate_limit_per_s"):
        SourceSettings(**USERS, rate_burst=10)


def test_range_mode_needs_room_for_a_whole_span() -> None:
    ranges = {**USERS, "mode": "ranges", "range_size": 1000}
    with pytest.raises(ValidationError, match=r"rate_burst \(500.0\) is smaller than range_size"):
        SourceSettings(**ranges, rate_limit_per_s=100, rate_burst=500)
    with pytest.raises(ValidationError, match=r"max_running \(999\) is smaller than range_size"):
        SourceSettings(**ranges, max_running=999)
    assert SourceSettings(**ranges, rate_limit_per_s=100, max_running=1000).burst(1000) == 2000


def test_queue_limits_reach_the_queue_source() -> None:
    jobs = JobsSettings(
        queues=["default", "mail"], limits={"mail": {"rate_limit_per_s": 100, "max_running": 4}}
    )
    by_name = {s.name: s for s in jobs.queue_sources()}
    assert by_name["jobs.mail"].rate_limit_per_s == 100
    assert by_name["jobs.mail"].max_running == 4
    assert not by_name["jobs.default"].limited


def test_limits_of_an_unknown_queue_are_refused() -> None:
    with pytest.raises(
        ValidationError, match=r"jobs.limits names mial, not in jobs.queues \(default, mail\)"
    ):
        JobsSettings(queues=["default", "mail"], limits={"mial": {"rate_limit_per_s": 100}})


def test_an_unknown_limit_key_is_refused() -> None:
    with pytest.raises(ValidationError, match="rate_limit"):
        JobsSettings(limits={"default": {"rate_limit": 100}})


def test_the_cli_refuses_a_bad_limit_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "duecast.toml"
    config.write_text(
        '[[sources]]\nname = "users"\ntable = "users"\ndue_column = "updated_time"\nperiod_s = 10\n'
        "rate_limit_per_s = -5\n",
        encoding="utf-8",
    )
    monkeypatch.setenv("DUECAST_CONFIG", str(config))
    assert cli.main(["status"]) == 2
    out, err = capsys.readouterr()
    assert "duecast status: invalid settings" in err
    assert "rate_limit_per_s" in err
    assert "Traceback" not in out + err


def test_task_limits_are_kept_by_task_name() -> None:
    jobs = JobsSettings(task_limits={"mail.send": {"rate_limit_per_s": 100, "max_running": 4}})
    assert jobs.task_limits["mail.send"].rate_limit_per_s == 100
    assert jobs.task_limits["mail.send"].max_running == 4
    assert all(not s.limited for s in jobs.queue_sources()), "a task's limits are not its queue's"


@pytest.mark.parametrize(
    ("limits", "message"),
    [
        ({"rate_limit_per_s": 0}, "rate_limit_per_s"),
        ({"rate_limit_per_s": math.nan}, "rate_limit_per_s"),
        ({"rate_limit_per_s": 1e12}, "rate_limit_per_s"),
        ({"max_running": 0}, "max_running"),
        ({"max_running": 2.5}, "max_running"),
        ({"rate_burst": 10}, "rate_burst is set without rate_limit_per_s"),
        ({"rate_limit_per_s": 10, "rate_burst": 0.5}, "rate_burst"),
        ({"rate_limit": 10}, "rate_limit"),
        ({}, r"jobs.task_limits.mail sets no limit: set rate_limit_per_s or max_running"),
    ],
)
def test_bad_task_limits_are_refused(limits: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        JobsSettings(task_limits={"mail": limits})


def test_task_limits_without_jobs_are_refused() -> None:
    with pytest.raises(ValidationError, match=r"jobs\.task_limits is set but jobs\.enabled is false"):
        JobsSettings(enabled=False, task_limits={"mail": {"max_running": 1}})


def test_a_task_name_too_long_for_its_bucket_is_refused() -> None:
    with pytest.raises(ValidationError, match="task_limits"):
        JobsSettings(task_limits={"t" * 187: {"max_running": 1}})
    assert JobsSettings(task_limits={"t" * 186: {"max_running": 1}}).task_limits


def test_the_cli_refuses_a_bad_task_limit_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "duecast.toml"
    config.write_text('[jobs.task_limits."mail.send"]\nmax_running = -1\n', encoding="utf-8")
    monkeypatch.setenv("DUECAST_CONFIG", str(config))
    assert cli.main(["status"]) == 2
    out, err = capsys.readouterr()
    assert "duecast status: invalid settings" in err
    assert "max_running" in err
    assert len(err.strip().splitlines()) == 1, err
    assert "Traceback" not in out + err
