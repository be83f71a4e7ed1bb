"""`[jobs.key_limits.<queue>]` max_running_per_key and a job's concurrency_key: every bad value refused
in one line naming it, before anything starts or is written."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from duecast import cli
from duecast.shared.api.enqueue import EnqueueError, Enqueuer, Job, encode
from duecast.shared.settings import JobsSettings, MySQLSettings, RedisSettings, Settings


def test_key_limits_are_kept_by_queue() -> None:
    jobs = JobsSettings(queues=["default", "mail"], key_limits={"mail": {"max_running_per_key": 4}})
    assert jobs.key_limits["mail"].max_running_per_key == 4
    assert all(not s.limited for s in jobs.queue_sources()), "a key's limit is not its queue's"


@pytest.mark.parametrize(
    ("limits", "message"),
    [
        ({"max_running_per_key": 0}, "max_running_per_key"),
        ({"max_running_per_key": -1}, "max_running_per_key"),
        ({"max_running_per_key": math.nan}, "max_running_per_key"),
        ({"max_running_per_key": 10**12}, "max_running_per_key"),
        ({"max_running_per_key": 2.5}, "max_running_per_key"),
        ({"max_running_per_key": "many"}, "max_running_per_key"),
        ({}, "max_running_per_key"),
        ({"max_running_per_key": 1, "max_running": 3}, "max_running"),
    ],
)
def test_bad_key_limits_are_refused(limits: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        JobsSettings(key_limits={"default": limits})


@pytest.mark.parametrize(
    ("jobs", "message"),
    [
        (
            {"key_limits": {"mial": {"max_running_per_key": 1}}},
            r"jobs.key_limits names mial, not in jobs.queues",
        ),
        ({"enabled": False, "key_limits": {"default": {"max_running_per_key": 1}}}, "jobs.enabled is false"),
        (
            {"key_limits": {"default": {"max_running_per_key": 1}}, "task_limits": {"t": {"max_running": 1}}},
            "jobs.key_limits and jobs.task_limits cannot both be set",
        ),
    ],
)
def test_key_limits_that_cannot_apply_are_refused(jobs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        JobsSettings(**jobs)


def test_the_cli_refuses_a_bad_key_limit_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "duecast.toml"
    config.write_text("[jobs.key_limits.default]\nmax_running_per_key = -1\n", encoding="utf-8")
    monkeypatch.setenv("DUECAST_CONFIG", str(config))
    assert cli.main(["status"]) == 2
    out, err = capsys.readouterr()
    assert "duecast status: invalid settings" in err
    assert "max_running_per_key" in err
    assert len(err.strip().splitlines()) == 1, err
    assert "Traceback" not in out + err


@pytest.mark.parametrize(
    ("key", "message"),
    [
        ("", "concurrency_key must be a string of 1-191 characters"),
        ("k" * 192, "concurrency_key must be a string of 1-191 characters"),
        (7, "concurrency_key must be a string of 1-191 characters"),
        ("acct ", "ends in a space, which MySQL ignores"),
        ("\ud800", "lone surrogate"),
    ],
)
def test_a_bad_concurrency_key_is_refused_in_one_line(key: object, message: str) -> None:
    with pytest.raises(EnqueueError, match=message) as caught:
        encode(Job("t", concurrency_key=key), JobsSettings(), None)  # type: ignore[arg-type]
    assert "\n" not in str(caught.value)


def test_a_concurrency_key_is_written_with_its_own_column_only_when_given() -> None:
    jobs = JobsSettings()
    keyed = encode(Job("t", concurrency_key="acct-1"), jobs, None)
    plain = encode(Job("t"), jobs, None)
    assert keyed.params(keyed=True)[-1] == "acct-1"
    assert plain.params() == keyed.params()[: len(plain.params())]
    assert len(plain.params()) == len(keyed.params()), "without `keyed`, the row as before"


class _Cursor:
    def __init__(self) -> None:
        self.sent: list[tuple[str, Any]] = []
        self.lastrowid = 1

    def execute(self, stmt: str, args: Any = None) -> int:
        self.sent.append((stmt, args))
        return 1


def test_the_insert_names_concurrency_key_only_for_jobs_given_one() -> None:
    """An enqueuer granted the columns of before (sql/grants.sql) enqueues jobs of no key as before."""
    settings = Settings(mysql=MySQLSettings(), redis=RedisSettings())
    writer = Enqueuer(settings, None)
    jobs = settings.jobs
    cur = _Cursor()
    writer._insert(cur, [encode(Job("t", 1), jobs, None), encode(Job("t", 2), jobs, None)])  # type: ignore[arg-type]
    writer._insert(
        cur, [encode(Job("t", 3), jobs, None), encode(Job("t", 4, concurrency_key="a"), jobs, None)]
    )  # type: ignore[arg-type]
    (plain, plain_args), (keyed, keyed_args) = cur.sent
    assert plain == writer.sql.insert + ",".join([writer.sql.insert_values] * 2)
    assert "concurrency_key" not in plain
    assert keyed == writer.sql.insert_keyed + ",".join([writer.sql.insert_keyed_values] * 2)
    assert keyed_args[10] is None, "the job of no key: NULL"
    assert keyed_args[-1] == "a"
    assert len(keyed_args) == len(plain_args) + 2
