"""Bad input from outside (issue 17): every value an enqueuer, `duecast enqueue` (one job or --file),
`duecast jobs list` or a settings file may carry is refused with one line naming the field, before
anything reaches MySQL or a parser that would raise a traceback instead.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from duecast import cli
from duecast.shared.api.enqueue import MAX_PAYLOAD_DEPTH, EnqueueError, Enqueuer, Job, Written, encode
from duecast.shared.settings import JobsSettings, SettingsFileError, load_settings
from duecast.shared.storage.admin.job_admin import JobAdmin

JOBS = JobsSettings()
TEN_YEARS_S = 3650 * 86400


def nested(depth: int) -> Any:
    """`depth` lists, one inside the other."""
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


@pytest.fixture(autouse=True)
def _nothing_is_written(monkeypatch: pytest.MonkeyPatch) -> None:
    """A refused input must never get as far as a statement."""

    def refuse(*_args: Any, **_kwargs: Any) -> Any:
        raise AssertionError("bad input reached the database")

    monkeypatch.setattr(Enqueuer, "write", refuse)
    monkeypatch.setattr(JobAdmin, "find", refuse)


@pytest.mark.parametrize(
    ("job", "message"),
    [
        (Job("t", delay_s=1e300), r"delay_s must be 0-315360000 s \(jobs.max_delay_s\), not 1e\+300"),
        (Job("t", delay_s=1e12), r"delay_s must be 0-315360000 s .*not 1000000000000.0"),
        (Job("t", delay_s=1e10), "delay_s must be 0-315360000"),  # accepted before: run_at in 2343
        (Job("t", delay_s=10**400), r"delay_s must be 0-315360000 s .*not 1000000.*\.\.\."),
        (Job("t", delay_s="5"), "delay_s must be a number of seconds, not '5'"),  # type: ignore[arg-type]
        (Job("t", delay_s=True), "delay_s must be a number of seconds, not True"),
        (Job("t", delay_s=float("nan")), "delay_s must be a finite number"),
        (Job("t", delay_s=float("-inf")), "delay_s must be a finite number"),
        (Job("t", delay_s=-1), "delay_s must be 0-"),
        (Job("t", unique_key="\ud800"), "unique_key '\\\\ud800' holds a lone surrogate"),
        (Job("t", unique_key=""), "unique_key must be a string of 1-191 characters"),
        (Job("t", unique_key="k" * 192), "unique_key must be a string of 1-191 characters"),
        (Job("t", unique_key=42), "unique_key must be a string of 1-191 characters, not 42"),  # type: ignore[arg-type]
        (Job("\ud800"), "task '\\\\ud800' holds a lone surrogate"),
        (Job(7), "task must be a string of 1-191 characters, not 7"),  # type: ignore[arg-type]
        (Job(["t"]), r"task must be a string of 1-191 characters, not \['t'\]"),  # type: ignore[arg-type]
        (Job("t", queue={"a": 1}), "unknown queue {'a': 1}"),  # type: ignore[arg-type]
        (Job("t", priority="1"), "priority must be an int 0-9"),  # type: ignore[arg-type]
        (Job("t", max_attempts=1.5), "max_attempts must be an int 1-10000"),  # type: ignore[arg-type]
        (Job("t", nested(1500)), "nested deeper than 100 levels"),
        (Job("t", nested(MAX_PAYLOAD_DEPTH + 1)), "nested deeper than 100 levels"),
        (Job("t", run_at=datetime(2030, 1, 1)), "run_at must be a timezone-aware datetime"),
        (Job("t", run_at="2030-01-01T00:00:00Z"), "run_at must be a timezone-aware datetime"),  # type: ignore[arg-type]
        (Job("t", run_at=datetime(9999, 12, 31, tzinfo=UTC)), "run_at must be between 1970 and 315360000 s"),
        (Job("t", run_at=datetime(1, 1, 1, tzinfo=timezone(timedelta(hours=5)))), "run_at .* out of range"),
        (Job("t", run_at=datetime(1969, 12, 31, tzinfo=UTC)), "run_at must be between 1970"),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)
def test_each_bad_value_is_an_enqueue_error_naming_its_field(job: Job, message: str) -> None:
    with pytest.raises(EnqueueError, match=message):
        encode(job, JOBS, None)


def test_the_limits_themselves_are_accepted() -> None:
    assert encode(Job("t", delay_s=TEN_YEARS_S), JOBS, None).delay_us == TEN_YEARS_S * 1_000_000
    assert encode(Job("t", delay_s=2.5), JOBS, None).delay_us == 2_500_000
    assert encode(Job("t", nested(MAX_PAYLOAD_DEPTH)), JOBS, None).payload.count("[") == 100
    assert encode(Job("t" * 191, unique_key="k" * 191), JOBS, None).unique_key == "k" * 191
    at = datetime.now(UTC) + timedelta(days=3649)
    assert encode(Job("t", run_at=at), JOBS, None).run_at_utc == at.replace(tzinfo=None)
    past = datetime(2001, 1, 1, tzinfo=UTC)
    assert encode(Job("t", run_at=past), JOBS, None).run_at_utc == datetime(2001, 1, 1)
    assert encode(Job("t", delay_s=5), JobsSettings(max_delay_s=5), None).delay_us == 5_000_000
    with pytest.raises(EnqueueError, match=r"0-5 s \(jobs.max_delay_s\)"):
        encode(Job("t", delay_s=5.001), JobsSettings(max_delay_s=5), None)


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    """`duecast ARGV`: its exit code and its stderr, which must be exactly one line."""
    code = cli.main(list(argv))
    err = capsys.readouterr().err.lstrip("\n")  # a transient progress bar leaves a blank line
    assert err.count("\n") == 1, err
    return code, err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--delay", "1e300"], "delay_s must be 0-315360000 s"),
        (["--delay", "1e12"], "delay_s must be 0-315360000 s"),
        (["--delay", "nan"], "delay_s must be a finite number"),
        (["--unique-key", "\ud800"], "unique_key '\\ud800' holds a lone surrogate"),
        (["--payload", "[" * 1500 + "]" * 1500], "--payload: nested too deeply to parse"),
        (["--payload", "[" * 150 + "]" * 150], "payload of 'x' is nested deeper than 100 levels"),
        (["--payload", "{"], "--payload: not JSON"),
        (["--payload", '"\\ud800"'], "payload of 'x' holds a lone surrogate"),
    ],
    ids=lambda v: v if isinstance(v, str) else v[0],
)
def test_enqueue_on_the_command_line_refuses_in_one_line(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, err = run(capsys, "enqueue", "x", *argv)
    assert code == 2
    assert err.startswith("duecast enqueue: ")
    assert message in err


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ('{"task": "x", "delay_s": 1e300}', "delay_s must be 0-315360000 s"),
        ('{"task": "x", "delay_s": 1e12}', "delay_s must be 0-315360000 s"),
        ('{"task": "x", "delay_s": "5"}', "delay_s must be a number of seconds, not '5'"),
        ('{"task": "x", "unique_key": "\\ud800"}', "unique_key '\\ud800' holds a lone surrogate"),
        ('{"task": "x", "unique_key": ["k"]}', "unique_key must be a string"),
        ('{"task": 5}', "task must be a string of 1-191 characters, not 5"),
        ('{"task": "x", "queue": null}', "unknown queue None"),
        ('{"task": "x", "payload": ' + "[" * 1500 + "]" * 1500 + "}", ": nested too deeply to parse"),
        ('{"task": "x", "payload": ' + "[" * 150 + "]" * 150 + "}", "nested deeper than 100 levels"),
        ('{"task": "x", "run_at": "2030-01-01"}', "unknown field(s) run_at"),
        ("[1, 2]", 'expected an object with a "task"'),
    ],
    ids=lambda v: v if len(v) < 60 else v[:60],
)
def test_enqueue_file_names_the_line_and_field_in_one_line(
    line: str, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "jobs.jsonl"
    path.write_text('{"task": "x"}\n' + line + "\n", encoding="utf-8")
    code, err = run(capsys, "enqueue", "--file", str(path))
    assert code == 2
    assert err.startswith(f"duecast enqueue: {path}:2: ")
    assert message in err


def test_enqueue_file_that_is_not_utf8_names_the_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "jobs.jsonl"
    path.write_bytes(b'{"task": "x"}\n{"task": "\xff"}\n')
    code, err = run(capsys, "enqueue", "--file", str(path))
    assert code == 2
    assert "not UTF-8 text" in err


@pytest.mark.parametrize("limit", ["-5", "0", "10001"])
def test_jobs_list_refuses_a_limit_out_of_range(limit: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, err = run(capsys, "jobs", "list", "--limit", limit)
    assert code == 2
    assert err == f"duecast jobs: --limit must be 1-10000, not {limit}\n"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["find", "t", "--key", "k", "--limit", "-5"], "--limit must be 1-10000, not -5"),
        (["volume", "t", "--buckets", "-5"], "--buckets must be 1-10000, not -5"),
        (["volume", "t", "--bucket-s", "nan"], "--bucket-s must be 1-31622400 s, not nan"),
        (["volume", "t", "--bucket-s", "1e300"], "--bucket-s must be 1-31622400 s, not 1e+300"),
    ],
)
def test_topics_commands_refuse_counts_out_of_range(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, err = run(capsys, "topics", *argv)
    assert code == 2
    assert err == f"duecast topics: {message}\n"


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (
            b'log_level = "INFO"\n[mysql\nhost = "db"\n',
            r"is not valid TOML: Expected '\]' .*\(at line 2, column 7\)",
        ),
        (b"[mysql]\nhost = \n", "is not valid TOML"),
        (b'[mysql]\nhost = "\xff"\n', r"is not UTF-8 text \(byte 16\)"),
        (b"\x00\x01\x02", "is not valid TOML"),
    ],
)
def test_a_broken_settings_file_is_one_line_naming_it(
    content: bytes, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "duecast.toml"
    path.write_bytes(content)
    with pytest.raises(SettingsFileError, match=message):
        load_settings(path)
    for argv in (["status"], ["migrate"], ["enqueue", "x"], ["web"], ["dispatcher"], ["worker"]):
        code, err = run(capsys, *argv, "--config", str(path))
        assert code == 2
        assert err.startswith(f"duecast {argv[0]}: settings file {path} is not "), argv
    for argv in (["jobs", "--config", str(path), "list"], ["topics", "--config", str(path), "status"]):
        code, err = run(capsys, *argv)
        assert code == 2
        assert err.startswith(f"duecast {argv[0]}: settings file {path} is not "), argv


def test_a_file_of_jobs_at_the_limits_is_accepted_up_to_the_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    rows: list[Any] = []

    def write(_self: Enqueuer, _cur: Any, given: list[Any], _dup: str) -> Written:
        rows.extend(given)
        return Written(0, {})

    monkeypatch.setattr(Enqueuer, "write", write)
    monkeypatch.setattr(Enqueuer, "wake", lambda _self: None)
    monkeypatch.setattr("duecast.shared.storage.db.Database.transaction", _no_transaction)
    path = tmp_path / "jobs.jsonl"
    lines = [
        {"task": "x", "delay_s": TEN_YEARS_S, "unique_key": "k" * 191},
        {"task": "x", "payload": nested(MAX_PAYLOAD_DEPTH)},
    ]
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    assert cli.main(["enqueue", "--file", str(path), "--no-check"]) == 0  # no workers to ask here
    assert [r.delay_us for r in rows] == [TEN_YEARS_S * 1_000_000, 0]


class _no_transaction:
    def __init__(self, *_args: Any, **_kwargs: Any) -> None:
        pass

    def __enter__(self) -> None:
        return None

    def __exit__(self, *_exc: object) -> None:
        return None
