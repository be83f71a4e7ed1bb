"""Issue 24.7: a read-only window (`SET GLOBAL read_only = 1`: a replica during a failover, or a
maintenance window) is a condition that passes. Each role says so in one WARNING line per cause per
interval, with no traceback, backs off, and carries on once the server takes writes again. Before,
each failed tick was an ERROR with its traceback: 846 lines in 20 s.

A private MariaDB, so the test may make it read-only; real dispatcher and worker processes, as a
non-SUPER account (read_only does not bind SUPER).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pymysql
import pytest

from duecast.shared.settings import MySQLSettings
from tests.chaos.private_mariadb import PrivateMariaDB, running_with
from tests.faults.conftest import FaultEnv
from tests.faults.env import RESCAN_PERIOD_S

pytestmark = pytest.mark.faults

DATABASE = "readonly"
USER, PASSWORD = "roles", "roles-pw"
WINDOW_S = 12.0  # the read-only window: longer than the log filter's 10 s interval
ROWS = 40
# What a role may log while the server refuses writes: duecast's error for MySQL's 1290.
ALLOW = ("StorageError", "OperationalError")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrivateMariaDB]:
    with running_with(tmp_path_factory.mktemp("mariadb"), DATABASE) as db:
        root_sql(db, f"CREATE USER '{USER}'@'%' IDENTIFIED BY '{PASSWORD}'")
        root_sql(db, f"GRANT ALL ON `{DATABASE}`.* TO '{USER}'@'%'")
        yield db


@pytest.fixture(scope="module")
def mysql_settings(server: PrivateMariaDB) -> MySQLSettings:
    """Overrides the session's: fault_env makes its table here (as root)."""
    return server.settings(DATABASE)


@pytest.fixture
def sql(server: PrivateMariaDB) -> Iterator[pymysql.cursors.Cursor]:
    conn = pymysql.connect(
        host="127.0.0.1", port=server.port, user="root", database=DATABASE, autocommit=True
    )
    yield conn.cursor()
    conn.close()


def root_sql(server: PrivateMariaDB, statement: str) -> None:
    conn = pymysql.connect(host="127.0.0.1", port=server.port, user="root", autocommit=True)
    with conn.cursor() as cur:
        cur.execute(statement)
    conn.close()


def checked_twice(env: FaultEnv) -> Callable[[], bool]:
    """Every row acked by a second attempt: the pass after the read-only window."""
    return lambda: not env.pending() and min(env.column("checked_by_attempt").values()) >= 2


def lines(path: Path, since: int = 0) -> list[str]:
    return path.read_text(errors="replace").splitlines()[since:]


def test_a_read_only_window_is_one_warning_line_per_cause_and_the_roles_carry_on(
    fault_env: Callable[..., FaultEnv], server: PrivateMariaDB
) -> None:
    env = fault_env("rescan")
    env.env.update(
        {
            "DUECAST_MYSQL__HOST": "127.0.0.1",
            "DUECAST_MYSQL__PORT": str(server.port),
            "DUECAST_MYSQL__USER": USER,
            "DUECAST_MYSQL__PASSWORD": PASSWORD,
        }
    )
    ids = env.insert(ROWS)
    dispatcher = env.dispatcher(allow=ALLOW)
    worker = env.worker("worker", allow=ALLOW)
    env.wait_for(lambda: not env.pending(), "the first pass")
    before = {p.name: len(lines(p.log)) for p in (dispatcher, worker)}

    root_sql(server, "SET GLOBAL read_only = 1")
    try:
        env.query(
            f"UPDATE {{t}} SET due_at = NOW(6) - INTERVAL {2 * RESCAN_PERIOD_S} SECOND"
        )  # root: all due again
        env.wait_for(
            lambda: any("1290" in t for t in lines(dispatcher.log, before["dispatcher"])),
            "the dispatcher to meet the read-only server",
        )
        time.sleep(WINDOW_S)  # the fault's length (as the 20 s window), not a wait for a result
    finally:
        root_sql(server, "SET GLOBAL read_only = 0")
    back = time.monotonic()
    env.wait_for(checked_twice(env), "every row checked again once the server takes writes", timeout=30)
    print(f"all {ROWS} rows checked again {time.monotonic() - back:.1f}s after read_only was lifted")

    for proc in (dispatcher, worker):
        said = lines(proc.log, before[proc.name])
        read_only = [t for t in said if "1290" in t]
        print(f"{proc.name}: {len(said)} lines, {len(read_only)} about read-only:", *read_only, sep="\n  ")
        assert not [t for t in said if "Traceback" in t], f"{proc.name} logged a traceback"
        assert not [t for t in said if re.search(r" (ERROR|CRITICAL) ", t)], f"{proc.name} logged an error"
        assert all(" WARNING " in t for t in read_only), read_only
        # A handful of causes (a role's tick, the leader's lease...), at most two lines each per
        # 10 s interval with a count of the rest, over a 12 s window: before, hundreds of lines.
        assert len(read_only) <= 16, f"{proc.name}: {len(read_only)} lines about read-only"
    assert any("1290" in t for t in lines(dispatcher.log, before["dispatcher"]))
    assert dispatcher.alive()
    assert worker.alive()
    verdict = env.verdict(ids)
    assert not verdict.lost
    assert not verdict.duplicates
