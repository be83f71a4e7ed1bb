"""How a failure becomes one line and an exit code (shared/process/failures.py), without servers:
each MySQL and Redis error an operator meets at start-up, settings errors, and what counts as a bug."""

from __future__ import annotations

import logging
import threading

import pymysql
import pytest
import redis
from redis.sentinel import MasterNotFoundError, SlaveNotFoundError

from duecast.shared.fanout.client import translate as translate_redis
from duecast.shared.fanout.protocol import QueueError, QueueUnavailable
from duecast.shared.process.failures import (
    EXIT_BUG,
    EXIT_CONFIG,
    EXIT_UNAVAILABLE,
    StartupError,
    explain,
    log_failure,
    retry_startup,
    run_command,
    transient_cause,
)
from duecast.shared.process.logs import REPEAT_BURST, RepeatFilter
from duecast.shared.settings import MySQLSettings, Settings
from duecast.shared.storage.db import server_note
from duecast.shared.storage.schema import SchemaError
from duecast.shared.storage.units import NotConnected, StorageError, TransientError, translate

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
        (  # mysql.tls = true against a server without TLS: was a traceback and exit 70
            at_connect(
                pymysql.err.OperationalError(2026, "SSL is required but the server doesn't support it")
            ),
            EXIT_UNAVAILABLE,
            "set mysql.tls = false",
        ),
    ],
    ids=["unknown-database", "access-denied", "too-many-connections", "refused", "no-tls"],
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


# ------------------------------------------------------- start-up steps meeting a passing error

LOCK_WAIT = TransientError("(1205, 'Lock wait timeout exceeded; try restarting transaction')", 1205)


class Flaky:
    """A start-up step that fails with the given errors first, then returns "done"."""

    def __init__(self, *errors: Exception, stop: threading.Event | None = None) -> None:
        self.errors = list(errors)
        self.calls = 0
        self.stop = stop  # set at the last failure: SIGTERM arriving while the step is retried

    def __call__(self) -> str:
        self.calls += 1
        if self.errors:
            exc = self.errors.pop(0)
            if not self.errors and self.stop is not None:
                self.stop.set()
            raise exc
        return "done"


def retried(caplog: pytest.LogCaptureFixture, step: Flaky, stop: threading.Event) -> str:
    with caplog.at_level(logging.WARNING, logger="duecast.startup"):
        return retry_startup(step, what="range discovery", stop=stop, base_s=0.001, cap_s=0.002)


def test_a_start_up_step_is_retried_through_transient_errors_with_one_line_each(
    caplog: pytest.LogCaptureFixture,
) -> None:
    lost = TransientError("(2013, 'Lost connection to MySQL server during query')", 2013)
    step = Flaky(LOCK_WAIT, LOCK_WAIT, lost, pymysql.err.OperationalError(1213, "Deadlock found"))

    assert retried(caplog, step, threading.Event()) == "done"

    assert step.calls == 5
    lines = [r for r in caplog.records if r.name == "duecast.startup"]
    assert [r.levelno for r in lines] == [logging.WARNING] * 4
    assert all(r.exc_info is None and "\n" not in r.getMessage() for r in lines)
    assert lines[0].getMessage().startswith("start-up: range discovery hit (1205, 'Lock wait timeout")
    assert "; retrying (retry 1) in " in lines[0].getMessage()
    assert "(2013, 'Lost connection" in lines[2].getMessage()
    assert "Deadlock found" in lines[3].getMessage()
    assert {getattr(r, "event", None) for r in lines} == {"startup.retried"}


@pytest.mark.parametrize(
    "error",
    [
        NotConnected('MySQL at 127.0.0.1:1: (2003, "Can\'t connect to MySQL server")', 2003),
        SchemaError("source users: table users has no column due_at; run `duecast migrate`"),
        StorageError("(1146, \"Table 'shop.users' doesn't exist\")", 1146),
    ],
    ids=["unreachable-server", "schema", "other-mysql-error"],
)
def test_a_start_up_step_fails_at_once_on_anything_that_does_not_pass(
    caplog: pytest.LogCaptureFixture, error: Exception
) -> None:
    step = Flaky(error)

    with pytest.raises(type(error)):
        retried(caplog, step, threading.Event())

    assert step.calls == 1
    assert not [r for r in caplog.records if r.name == "duecast.startup"]


def test_a_stop_request_ends_the_retries_in_one_line_with_exit_3(caplog: pytest.LogCaptureFixture) -> None:
    stop = threading.Event()
    step = Flaky(LOCK_WAIT, LOCK_WAIT, stop=stop)

    with pytest.raises(StartupError) as caught:
        retried(caplog, step, stop)

    assert step.calls == 2
    assert caught.value.code == EXIT_UNAVAILABLE
    line = str(caught.value)
    assert line.startswith("stopped during start-up while range discovery kept failing: ")
    assert line.endswith(f"TransientError: {LOCK_WAIT}")
    assert "\n" not in line


def test_a_command_ending_on_a_lock_wait_or_deadlock_says_so_in_one_line() -> None:
    for exc in (LOCK_WAIT, TransientError("(1213, 'Deadlock found when trying to get lock')", 1213)):
        problem = explain(exc)
        assert problem is not None
        assert problem.code == EXIT_UNAVAILABLE
        assert str(problem).startswith(f"TransientError: {exc}")
        assert str(problem).endswith("it passes: run it again")


@pytest.mark.parametrize(
    ("said", "words"),
    [
        (redis.AuthenticationError("invalid username-password pair or user is disabled."), "redis.url"),
        (
            redis.exceptions.NoPermissionError("this user has no permissions to run the 'lmove' command"),
            "ACL",
        ),
    ],
    ids=["credentials-revoked", "command-revoked"],
)
def test_revoked_redis_credentials_under_a_running_role_are_one_rate_limited_warning(
    said: redis.RedisError, words: str
) -> None:
    """Was an ERROR with a traceback on every tick."""
    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append  # type: ignore[method-assign]
    handler.addFilter(RepeatFilter(interval_s=60.0))
    logger = logging.getLogger("duecast.test-revoked")
    logger.addHandler(handler)
    try:
        for n in range(1, 11):  # ten failed ticks, as the loop logs them
            try:
                raise translate_redis(said) from said
            except QueueError as exc:
                log_failure(logger, exc, "%s: tick failed (%d in a row)", "worker", n)
    finally:
        logger.removeHandler(handler)
    assert len(records) == REPEAT_BURST  # then quiet until the interval ends
    for record in records:
        assert record.levelno == logging.WARNING
        assert record.exc_info is None
        assert words in record.getMessage()
        assert "\n" not in record.getMessage()


@pytest.mark.parametrize(
    "said",
    [
        redis.exceptions.ClusterDownError("The cluster is down"),
        redis.exceptions.MasterDownError("Link with MASTER is down and replica-serve-stale-data is 'no'."),
        redis.exceptions.TryAgainError("Multiple keys request during rehashing of slot"),
        redis.exceptions.AskError("8539 127.0.0.1:30002"),  # a MULTI on a slot half moved
        redis.exceptions.MovedError("8539 127.0.0.1:30002"),  # ...and once it has moved
        redis.exceptions.ClusterError("TTL exhausted."),
        redis.exceptions.ReadOnlyError("You can't write against a read only replica."),
        MasterNotFoundError("No master found for 'duecast'"),
        SlaveNotFoundError("No slave found for 'duecast'"),
    ],
    ids=[
        "cluster-down",
        "master-down",
        "try-again",
        "ask",
        "moved",
        "ttl-exhausted",
        "read-only",
        "no-master",
        "no-replica",
    ],
)
def test_a_redis_failover_under_a_running_role_is_one_rate_limited_warning(said: Exception) -> None:
    """A failover's and a reshard's errors (issue 24.10): ClusterDownError was an ERROR with a traceback
    on every tick, and so were ASK and MOVED, which redis-py raises for a MULTI on a slot being moved."""
    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append  # type: ignore[method-assign]
    handler.addFilter(RepeatFilter(interval_s=60.0))
    logger = logging.getLogger("duecast.test-failover")
    logger.addHandler(handler)
    try:
        for n in range(1, 11):  # ten failed ticks, as the loop logs them
            mine = translate_redis(said)
            assert isinstance(mine, QueueUnavailable)  # the loop waits for Redis to answer again
            try:
                raise mine from said
            except QueueError as exc:
                log_failure(logger, exc, "%s: tick failed (%d in a row)", "worker", n)
    finally:
        logger.removeHandler(handler)
    assert len(records) == REPEAT_BURST  # then quiet until the interval ends
    for record in records:
        assert record.levelno == logging.WARNING
        assert record.exc_info is None
        assert type(said).__name__ in record.getMessage()
        assert "\n" not in record.getMessage()
    problem = explain(said)  # a command meeting one: one line, exit 3
    assert problem is not None
    assert problem.code == EXIT_UNAVAILABLE
