"""Issue 16.6: servers that hold a role up. A MySQL server that accepts TCP and never answers holds
a connect for mysql.connect_timeout_s (not read_timeout_s) and the error names host:port; a Redis
that refuses duecast's password ends the start with one line instead of being retried for ever.

The silent server is a listening socket that never accepts: the kernel completes the TCP handshake,
nobody sends MySQL's greeting. The Redis is a private redis-server with requirepass.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from duecast.shared.settings import MySQLSettings
from duecast.shared.storage.db import Database, connect
from tests.faults.private_redis import PrivateRedis, free_port
from tests.faults.procs import ROOT

pytestmark = pytest.mark.faults

READ_TIMEOUT_S = 30.0


@pytest.fixture
def silent_port() -> Iterator[int]:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(64)
        yield int(listener.getsockname()[1])


def _silent(port: int, connect_timeout_s: float) -> MySQLSettings:
    return MySQLSettings(
        host="127.0.0.1",
        port=port,
        connect_timeout_s=connect_timeout_s,
        read_timeout_s=READ_TIMEOUT_S,
        lock_wait_s=2,
    )


def test_a_silent_mysql_holds_a_connect_for_connect_timeout_and_is_named(silent_port: int) -> None:
    settings = _silent(silent_port, connect_timeout_s=1.0)
    started = time.monotonic()
    with pytest.raises(Exception) as caught, Database(settings).transaction() as cur:  # noqa: PT011
        cur.execute("SELECT 1")  # not reached: the connect fails
    waited = time.monotonic() - started
    assert 0.9 < waited < 3.0, (
        f"held {waited:.1f}s; connect_timeout_s is 1s, read_timeout_s {READ_TIMEOUT_S}s"
    )
    text = str(caught.value)
    assert f"127.0.0.1:{silent_port}" in text
    assert "connect_timeout_s" in text


def test_after_connecting_statements_get_read_timeout(mysql_settings: MySQLSettings) -> None:
    """The handshake's short timeout must not stay on the connection: a statement that legitimately
    waits (a lock wait, a big sweep) gets mysql.read_timeout_s. (Also fails if PyMySQL renames the
    attributes duecast sets.)"""
    settings = mysql_settings.model_copy(update={"connect_timeout_s": 1.0, "read_timeout_s": 9.0})
    conn = connect(settings)
    try:
        assert conn._read_timeout == 9.0
        assert conn._write_timeout == 9.0
        with conn.cursor() as cur:
            cur.execute("SELECT SLEEP(1.5)")  # longer than connect_timeout_s: not cut off
            assert cur.fetchone() == (0,)
    finally:
        conn.close()


def _duecast(
    args: list[str], env: dict[str, str], timeout_s: float
) -> tuple[subprocess.CompletedProcess[str], float]:
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "duecast", *args],
        cwd=ROOT,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )
    return done, time.monotonic() - started


def test_a_dispatcher_against_a_silent_mysql_stops_within_connect_timeout(silent_port: int) -> None:
    done, took = _duecast(
        ["dispatcher"],
        {
            "DUECAST_MYSQL__PORT": str(silent_port),
            "DUECAST_MYSQL__CONNECT_TIMEOUT_S": "1",
            "DUECAST_MYSQL__READ_TIMEOUT_S": str(READ_TIMEOUT_S),
        },
        timeout_s=25,
    )
    assert done.returncode != 0, done.stderr
    assert took < 10, f"the start took {took:.1f}s"
    assert f"127.0.0.1:{silent_port}" in done.stderr, done.stderr[-2000:]


@pytest.mark.parametrize("health", [False, True], ids=["plain", "health-probes-on"])
def test_a_wrong_redis_password_ends_the_start_in_one_line(tmp_path: Path, health: bool) -> None:
    """With health probes on, an unreachable Redis is waited for; refused credentials never are."""
    server = PrivateRedis(tmp_path, password="right-one")
    server.start()
    env = {"DUECAST_REDIS__URL": f"redis://:wrong-one@127.0.0.1:{server.port}/0"}
    if health:
        env["DUECAST_HEALTH__PORT"] = str(free_port())
    try:
        done, took = _duecast(["dispatcher"], env, timeout_s=25)
    finally:
        server.kill()
    assert done.returncode == 2, done.stderr[-2000:]
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr[-2000:]
    assert "refused the credentials" in lines[0]
    assert "redis.url" in lines[0]
    assert "wrong-one" not in done.stderr  # never the password
    assert took < 10
