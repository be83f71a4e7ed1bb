"""Secrets never reach a log line or an error, when a connection fails for any reason (issue 4).

Failures run through the production loop (shared.process.loop.run logs each failed tick with its traceback)
and through the `duecast` command's start-up, against the real servers: wrong and missing
passwords, unreachable servers, a source naming a column that does not exist.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import threading
import traceback
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from pydantic import SecretStr

from duecast.shared.fanout.client import connect_redis
from duecast.shared.fanout.keys import Keys
from duecast.shared.fanout.queue import ReadyQueue
from duecast.shared.process.loop import Tick, run
from duecast.shared.settings import MySQLSettings, RedisSettings, Settings
from duecast.shared.storage.db import Database
from tests.integration import apps
from tests.integration.conftest import Env

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[3]
SECRET = "pw-SECRET-b7e2c9"


class OneTick:
    """A role whose single tick runs `step` and asks the loop to stop: the loop logs its failure."""

    name = "secret-probe"

    def __init__(self, step: Callable[[], object], stop: threading.Event) -> None:
        self.step = step
        self.stop = stop
        self.error: BaseException | None = None

    def tick(self) -> Tick:
        self.stop.set()
        try:
            self.step()
        except Exception as exc:
            self.error = exc
            raise
        return Tick(0, idle=True)


def failure_text(step: Callable[[], object], caplog: pytest.LogCaptureFixture) -> str:
    """Everything the loop logged for the failed step, and its exception formatted every way."""
    stop = threading.Event()
    role = OneTick(step, stop)
    with caplog.at_level(logging.DEBUG):
        run(role, stop)
    assert role.error is not None, "the step was expected to fail"
    assert "tick failed" in caplog.text
    exc = role.error
    return "\n".join(
        [caplog.text, "".join(traceback.format_exception(exc)), str(exc), repr(exc), repr(exc.args)]
    )


def shared_redis() -> tuple[str, int]:
    client = connect_redis(Settings().redis)
    kwargs = client.connection_pool.connection_kwargs
    client.close()
    return str(kwargs.get("host", "127.0.0.1")), int(kwargs.get("port", 6379))


@pytest.mark.parametrize(
    "where",
    ["unreachable", "unknown-user", "no-such-host"],
)
def test_a_failed_redis_connection_never_logs_the_password(
    where: str, caplog: pytest.LogCaptureFixture
) -> None:
    host, port = shared_redis()
    url, says = {
        "unreachable": (f"redis://duecast:{SECRET}@127.0.0.1:1/0", "connecting to 127.0.0.1:1"),
        "unknown-user": (
            f"redis://dcsec-nobody-{uuid.uuid4().hex[:6]}:{SECRET}@{host}:{port}/0",
            "invalid username-password pair",
        ),
        "no-such-host": (
            f"redis://duecast:{SECRET}@duecast-no-such-host.invalid:6379/0",
            "connecting to duecast-no-such-host.invalid:6379",
        ),
    }[where]
    settings = RedisSettings(url=url, socket_timeout_s=3, key_prefix="duecast-test-secrets")
    queue = ReadyQueue(connect_redis(settings), Keys(settings.key_prefix))
    try:
        text = failure_text(lambda: queue.length("users"), caplog)
    finally:
        queue.client.close()
    assert says in text  # the failure is there, saying what failed...
    assert SECRET not in text  # ...and never with what password


@pytest.mark.parametrize("password", [SECRET, ""], ids=["wrong-password", "missing-password"])
def test_a_refused_mysql_login_names_the_user_never_the_password(
    mysql_settings: MySQLSettings, caplog: pytest.LogCaptureFixture, password: str
) -> None:
    user = f"dcsec_nobody_{uuid.uuid4().hex[:6]}"  # no such account: nothing is created
    db = Database(mysql_settings.model_copy(update={"user": user, "password": SecretStr(password)}))

    def unit() -> None:
        with db.transaction() as cur:
            cur.execute("SELECT 1")

    text = failure_text(unit, caplog)
    assert f"Access denied for user '{user}'" in text
    assert SECRET not in text


def test_an_unreachable_mysql_never_logs_the_password(
    mysql_settings: MySQLSettings, caplog: pytest.LogCaptureFixture
) -> None:
    settings = mysql_settings.model_copy(
        update={"port": 1, "password": SecretStr(SECRET), "connect_timeout_s": 2}
    )
    db = Database(settings)

    def unit() -> None:
        with db.transaction() as cur:
            cur.execute("SELECT 1")

    text = failure_text(unit, caplog)
    assert "Can't connect" in text
    assert SECRET not in text


# ---------------------------------------------------------------- the command's start-up


def run_cli(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "duecast", *args],
        cwd=ROOT,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def cli_env(env: Env, **extra: str) -> dict[str, str]:
    return {
        "DUECAST_MYSQL__DATABASE": env.settings.mysql.database,
        "DUECAST_REDIS__KEY_PREFIX": env.settings.redis.key_prefix,
        "DUECAST_JOBS__ENABLED": "false",
        "DUECAST_SOURCES": json.dumps([env.source.model_dump()]),
        **extra,
    }


def test_start_up_with_a_wrong_mysql_password_fails_without_printing_it(
    make_env: Callable[..., Env],
) -> None:
    env = make_env("rescan")
    done = run_cli(
        ["status"], cli_env(env, DUECAST_MYSQL__USER="dcsec_nobody", DUECAST_MYSQL__PASSWORD=SECRET)
    )
    assert done.returncode != 0
    assert "Access denied for user 'dcsec_nobody'" in done.stderr
    assert SECRET not in done.stdout + done.stderr


def test_start_up_with_a_wrong_redis_password_fails_without_printing_it(
    make_env: Callable[..., Env],
) -> None:
    env = make_env("rescan")
    host, port = shared_redis()
    url = f"redis://dcsec-nobody:{SECRET}@{host}:{port}/0"
    done = run_cli(["status"], cli_env(env, DUECAST_REDIS__URL=url))
    assert done.returncode != 0
    assert "invalid username-password pair" in done.stderr
    assert SECRET not in done.stdout + done.stderr


@pytest.mark.parametrize("column", ["due_column", "id_column"])
def test_a_worker_whose_source_names_an_unknown_column_stops_at_start_up(
    make_env: Callable[..., Env], column: str
) -> None:
    env = make_env("rescan", name=apps.RESCAN)
    source = {**env.source.model_dump(), column: "no_such_column"}
    settings = {**cli_env(env), "DUECAST_SOURCES": json.dumps([source])}
    done = run_cli(["worker", "--app", "tests.integration.apps", "--source", apps.RESCAN], settings)
    assert done.returncode == 2, done.stderr
    assert f"table {env.table} has no column no_such_column" in done.stderr
    assert "Traceback" not in done.stderr
