"""How a failure becomes one line and an exit code (shared/process/failures.py), without servers:
each MySQL and Redis error an operator meets at start-up, settings errors, and what counts as a bug."""

from __future__ import annotations

import pymysql
import pytest
import redis

from duecast.shared.process.failures import (
    EXIT_BUG,
    EXIT_CONFIG,
    EXIT_UNAVAILABLE,
    StartupError,
    explain,
    run_command,
    transient_cause,
)
from duecast.shared.settings import MySQLSettings, Settings
from duecast.shared.storage.db import server_note
from duecast.shared.storage.units import translate

NOTE = server_note(MySQLSettings(host="db.internal", port=3307, user="app", database="shop"))


def at_connect(exc: pymysql.err.MySQLError) -> pymysql.err.MySQLError:
    exc.add_note(NOTE)  # what storage.db.connect adds
    return exc


@pytest.mark.parametrize(
    ("exc", "code", "words"),
    [
        (
            at_connect(pymysql.err.OperationalError(1049, "Unknown database 'shop'")),
            EXIT_CONFIG,
            "does not exist",
        ),
        (
            at_connect(pymysql.err.OperationalError(1045, "Access denied for user 'app'")),
            EXIT_CONFIG,
            "mysql.password",
        ),
        (
            at_connect(pymysql.err.OperationalError(1040, "Too many connections")),
            EXIT_UNAVAILABLE,
            "max_connections",
        ),
        (
            at_connect(pymysql.err.OperationalError(2003, "Can't connect to MySQL server")),
            EXIT_UNAVAILABLE,
            "mysql.port",
        ),
    ],
    ids=["unknown-database", "access-denied", "too-many-connections", "refused"],
)
def test_mysql_errors_name_the_server_and_the_setting(exc: Exception, code: int, words: str) -> None:
    problem = explain(exc)

    assert problem is not None
    assert problem.code == code
    assert str(problem).startswith("MySQL db.internal:3307, user 'app', database 'shop': ")
    assert words in str(problem)
    assert "\n" not in str(problem)


def test_a_mysql_error_translated_by_storage_is_explained_from_the_driver_error() -> None:
    driver = at_connect(pymysql.err.OperationalError(2013, "Lost connection to MySQL server during query"))
    try:
        raise translate(driver) from driver
    except Exception as mine:
        problem = explain(mine)
        cause = transient_cause(mine)
    assert problem is not None
    assert problem.code == EXIT_UNAVAILABLE
    assert cause is not None
    assert "Lost connection" in cause


def test_redis_errors_name_redis_url() -> None:
    down = explain(redis.ConnectionError("Error 111 connecting to 127.0.0.1:6380. Connection refused."))
    auth = explain(redis.AuthenticationError("invalid username-password pair"))
    assert down is not None
    assert auth is not None
    assert (down.code, auth.code) == (EXIT_UNAVAILABLE, EXIT_CONFIG)
    assert "127.0.0.1:6380" in str(down)
    assert "redis.url" in str(down)
    assert "redis.url" in str(auth)


def test_every_settings_error_is_on_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DUECAST_MYSQL__PORT", "three")
    monkeypatch.setenv("DUECAST_REDIS__KEY_PREFIX", "has spaces")
    with pytest.raises(Exception) as caught:  # noqa: PT011 - pydantic's ValidationError
        Settings()
    problem = explain(caught.value)
    assert problem is not None
    assert problem.code == EXIT_CONFIG
    assert "\n" not in str(problem)
    assert "mysql.port: " in str(problem)
    assert "redis.key_prefix: " in str(problem)


def test_run_command_prints_one_line_and_a_bug_prints_its_traceback(
    capsys: pytest.CaptureFixture[str],
) -> None:
    def refused(_argv: list[str]) -> int:
        raise StartupError("no app given; pass --app")

    def bug(_argv: list[str]) -> int:
        raise ZeroDivisionError("division by zero")

    assert run_command("duecast worker", refused, []) == EXIT_CONFIG
    assert capsys.readouterr().err == "duecast worker: no app given; pass --app\n"
    assert run_command("duecast worker", bug, []) == EXIT_BUG
    err = capsys.readouterr().err
    assert "Traceback (most recent call last)" in err
    assert err.endswith(
        "duecast worker: unexpected error (a bug: please report it with the traceback above)\n"
    )
    assert transient_cause(ZeroDivisionError()) is None
