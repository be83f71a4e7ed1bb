"""Inconsistent enqueue limits (issue 25, item 13): each refused in one line, before anything is
written: on_duplicate other than "error"/"keep", a unique key ending in a space (MySQL's PAD SPACE
makes 'k1 ' the key 'k1'), a --file line holding one key twice, and more than MAX_JOBS_PER_CALL jobs
in one enqueue_many (or file): all or nothing is the promise, so the batch is refused, not split."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from duecast import cli
from duecast.shared.api import job_input
from duecast.shared.api.enqueue import MAX_JOBS_PER_CALL, EnqueueError, Enqueuer, Job, encode
from duecast.shared.settings import JobsSettings, MySQLSettings, RedisSettings, Settings


@pytest.fixture(autouse=True)
def _nothing_is_written(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*_args: Any, **_kwargs: Any) -> Any:
        raise AssertionError("bad input reached the database")

    for name in ("write", "write_ids", "insert_rows", "insert_rows_with_ids", "insert_in_chunks"):
        monkeypatch.setattr(Enqueuer, name, refuse)


def _enqueuer() -> Enqueuer:
    return Enqueuer(Settings(mysql=MySQLSettings(), redis=RedisSettings()), None)


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    code = cli.main(list(argv))
    err = capsys.readouterr().err.lstrip("\n")  # a transient progress bar leaves a blank line
    assert err.count("\n") == 1, err
    return code, err


def test_an_unknown_on_duplicate_is_refused_in_one_line() -> None:
    with pytest.raises(EnqueueError, match=r'^on_duplicate must be "error" or "keep", not \'bogus\'$'):
        _enqueuer().enqueue("t", on_duplicate="bogus")  # type: ignore[arg-type]
    with pytest.raises(EnqueueError, match="on_duplicate must be"):
        _enqueuer().enqueue_many([Job("t")], on_duplicate="Keep")  # type: ignore[arg-type]


@pytest.mark.parametrize("key", ["k1 ", "k1  ", " "])
def test_a_unique_key_ending_in_a_space_is_refused(key: str) -> None:
    with pytest.raises(EnqueueError, match="ends in a space, which MySQL ignores"):
        encode(Job("t", unique_key=key), JobsSettings(), None)


def test_other_unique_keys_stay_as_given() -> None:
    for key in (" k1", "k1\t", "k 1", "k1"):
        assert encode(Job("t", unique_key=key), JobsSettings(), None).unique_key == key


def test_more_jobs_than_the_cap_in_one_enqueue_many_are_refused_before_any_write() -> None:
    made = 0

    def jobs() -> Any:
        nonlocal made
        while True:
            made += 1
            yield Job("t")

    with pytest.raises(EnqueueError, match=r"^enqueue_many of more than 100,000 jobs .*split them over"):
        _enqueuer().enqueue_many(jobs())
    assert made == MAX_JOBS_PER_CALL + 1  # stopped at the first one too many, not after a million


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ('{"task": "x", "task": "y"}', "the key 'task' appears twice in one object"),
        ('{"task": "x", "payload": {"a": 1, "a": 2}}', "the key 'a' appears twice in one object"),
    ],
)
def test_a_file_line_with_a_duplicated_key_is_refused_naming_the_line(
    line: str, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "jobs.jsonl"
    path.write_text('{"task": "x"}\n' + line + "\n", encoding="utf-8")
    code, err = _run(capsys, "enqueue", "--file", str(path), "--no-check")
    assert code == 2
    assert err.startswith(f"duecast enqueue: {path}:2: ")
    assert message in err


def test_a_payload_with_a_duplicated_key_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    code, err = _run(capsys, "enqueue", "x", "--payload", '{"a": 1, "a": 2}', "--no-check")
    assert code == 2
    assert "--payload: the key 'a' appears twice in one object" in err


def test_a_file_of_more_jobs_than_the_cap_is_refused_naming_the_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(job_input, "MAX_JOBS_PER_CALL", 3)  # the same check as enqueue_many's, made small
    path = tmp_path / "jobs.jsonl"
    path.write_text('{"task": "x"}\n' * 5, encoding="utf-8")
    code, err = _run(capsys, "enqueue", "--file", str(path), "--no-check")
    assert code == 2
    assert err.startswith(f"duecast enqueue: {path}:4: a file of more than 3 jobs in one transaction")
    assert "split it into several files" in err
