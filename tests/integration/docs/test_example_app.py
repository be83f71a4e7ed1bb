"""examples/blockcheck end to end, exactly as its README tells a user: the README's ```sh blocks run
in order, in one shell, in the example's directory, with real `duecast` processes.

Step 1 (creating a virtualenv and installing duecast) is the one block not run: the test runs in
duecast's own environment, and scripts/wheel-smoke installs the built wheel into a fresh one. Two
things are pointed elsewhere so that the run is private: the database and key prefix (`blockcheck`
in the README, renamed in its `mysql` / `redis-cli` lines and overridden by DUECAST_* for duecast),
and the servers (the `mysql` and `redis-cli` on PATH are shims adding the test servers' address).
"""

from __future__ import annotations

import datetime as dt
import os
import re
import shlex
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pymysql
import pytest
import redis

from duecast.shared.settings import MySQLSettings, RedisSettings
from duecast.shared.storage.db import connect
from tests.conftest import TEST_DATABASE
from tests.integration.docblocks import Block, blocks
from tests.integration.polling import wait_until

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE = ROOT / "examples" / "blockcheck"
USERS = 1000  # rows table.sql inserts


def steps() -> tuple[Block, list[Block]]:
    """(the install block, the blocks the test runs), from the README."""
    found = [b for b in blocks(EXAMPLE / "README.md") if b.lang == "sh"]
    install, rest = found[0], found[1:]
    assert "pip install" in install.text, "step 1 is no longer the install block"
    return install, rest


def rename(block: str, database: str, prefix: str) -> str:
    """The README's `blockcheck` database and key prefix, in its mysql and redis-cli lines, made private."""
    out = []
    for line in block.splitlines():
        private = line
        if re.match(r"\s*(mysql|redis-cli)\b", line):
            private = re.sub(r"\bblockcheck\b", database, line).replace(
                "{" + database + "}", "{" + prefix + "}"
            )
        out.append(private)
    return "\n".join(out) + "\n"


def shims(bin_dir: Path, mysql: MySQLSettings, redis_settings: RedisSettings) -> None:
    """`mysql` and `redis-cli` that reach the test's servers (a user's come from their own config)."""
    bin_dir.mkdir()
    cnf = bin_dir / "my.cnf"
    password = mysql.password.get_secret_value()
    cnf.write_text(
        f"[client]\nhost={mysql.host}\nport={mysql.port}\nuser={mysql.user}\npassword={password}\n"
    )
    url = redis_settings.url.get_secret_value()
    for name, args in (("mysql", f"--defaults-extra-file={cnf}"), ("redis-cli", f"-u {shlex.quote(url)}")):
        real = subprocess.run(
            ["bash", "-c", f"command -v {name}"], capture_output=True, text=True, check=True
        )
        shim = bin_dir / name
        shim.write_text(f'#!/bin/sh\nexec {real.stdout.strip()} {args} "$@"\n')
        shim.chmod(0o755)


class Shell:
    """One bash reading the README's blocks from a pipe, so `&` jobs and `kill %1` span the steps."""

    def __init__(self, env: dict[str, str], out_dir: Path) -> None:
        self.out_dir = out_dir
        self.n = 0
        self.proc = subprocess.Popen(
            ["bash"], cwd=EXAMPLE, env=env, stdin=subprocess.PIPE, text=True, start_new_session=True
        )

    def run(self, block: str, timeout_s: float = 60) -> str:
        """Run one block in the shell itself (not a subshell); return its output, fail on a non-zero exit."""
        self.n += 1
        out, rc = self.out_dir / f"step{self.n}.out", self.out_dir / f"step{self.n}.rc"
        assert self.proc.stdin is not None
        self.proc.stdin.write(f"{{\n{block}}} >{out} 2>&1 </dev/null; echo $? >{rc}.tmp; mv {rc}.tmp {rc}\n")
        self.proc.stdin.flush()
        wait_until(rc.exists, f"step {self.n} to finish:\n{block}", timeout_s=timeout_s)
        text = out.read_text()
        assert rc.read_text().strip() == "0", f"step {self.n} failed:\n{block}\n{text}"
        return text

    def close(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)  # only on failure: the README's step 5 stops it all
        self.proc.wait(timeout=10)


@pytest.fixture
def private(mysql_settings: MySQLSettings, redis_settings: RedisSettings) -> Iterator[tuple[str, str]]:
    """A database name (not created: the README does that) and a key prefix, removed afterwards."""
    database = f"{TEST_DATABASE}_bc_{uuid.uuid4().hex[:4]}"
    yield database, redis_settings.key_prefix
    admin = connect(mysql_settings, database=False)
    with admin.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS `{database}`")
    admin.close()


def db_now(mysql: MySQLSettings) -> dt.datetime:
    """The server's NOW(6): updated_time is written on this clock."""
    admin = connect(mysql, database=False)
    with admin.cursor() as cur:
        cur.execute("SELECT NOW(6)")
        row = cur.fetchone()
    admin.close()
    assert row is not None
    return row[0]  # type: ignore[no-any-return]


def checked_twice(mysql: MySQLSettings, database: str, since: dt.datetime) -> bool:
    """Every user checked at least twice (the first pass and a re-check), the last one after `since`."""
    conn = connect(mysql.model_copy(update={"database": database}))
    try:
        with conn.cursor() as cur:
            cur.execute(
                "SELECT COUNT(*) FROM user_block_status WHERE dc_attempt >= 2 AND dc_state = 0 "
                "AND updated_time >= %s",
                (since,),
            )
            row = cur.fetchone()
    except pymysql.err.ProgrammingError:  # the table is not there yet
        return False
    finally:
        conn.close()
    return row is not None and int(row[0]) == USERS


def test_the_example_runs_as_its_readme_says(
    mysql_settings: MySQLSettings, redis_settings: RedisSettings, private: tuple[str, str], tmp_path: Path
) -> None:
    database, prefix = private
    _, (create, start, status, stop) = steps()
    shims(tmp_path / "bin", mysql_settings, redis_settings)
    env = {k: v for k, v in os.environ.items() if not k.startswith("DUECAST_")}
    env.update(
        PATH=f"{tmp_path / 'bin'}:{Path(sys.executable).parent}:{env['PATH']}",
        PYTHONPATH=str(ROOT),  # this checkout's duecast, as installed in step 1
        PYTHONDONTWRITEBYTECODE="1",
        DUECAST_MYSQL__HOST=mysql_settings.host,
        DUECAST_MYSQL__PORT=str(mysql_settings.port),
        DUECAST_MYSQL__USER=mysql_settings.user,
        DUECAST_MYSQL__PASSWORD=mysql_settings.password.get_secret_value(),
        DUECAST_MYSQL__DATABASE=database,
        DUECAST_REDIS__URL=redis_settings.url.get_secret_value(),
        DUECAST_REDIS__KEY_PREFIX=prefix,
    )
    shell = Shell(env, tmp_path)
    try:
        started = db_now(mysql_settings)
        migrate = shell.run(rename(create.text, database, prefix))
        assert "step(s) applied" in migrate
        shell.run(start.text)
        wait_until(
            lambda: checked_twice(mysql_settings, database, started),
            "every user re-checked",
            timeout_s=90,
        )
        shown = shell.run(status.text)
        assert "user_block_status" in shown, shown
        assert "workers alive" in shown, shown
        stopped = shell.run(rename(stop.text, database, prefix))
        assert "Traceback" not in stopped, stopped
    finally:
        shell.close()
    logs = (tmp_path / "step2.out").read_text()  # the two processes' output
    assert "Traceback" not in logs, logs
    for name in ("dispatcher stopped", "worker stopped"):
        assert name in logs, f"no '{name}' line: not stopped by step 5"
    admin = connect(mysql_settings, database=False)
    with admin.cursor() as cur:
        cur.execute("SELECT COUNT(*) FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = %s", (database,))
        assert cur.fetchone() == (0,), "step 5 dropped the database"
    admin.close()
    client = redis.Redis.from_url(redis_settings.url.get_secret_value())
    assert not list(client.scan_iter(match=f"{{{prefix}}}:*")), "step 5 deleted the keys"
    client.close()
