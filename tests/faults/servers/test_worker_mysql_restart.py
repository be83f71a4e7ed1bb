"""Issue 16.9: a MariaDB restart under a worker running a row-mode batch. Its ack meets a dead server:
the worker keeps the outcomes (the rows stay started, RUNNING under their leases) and acks them again
after a backoff, so once MariaDB is back they are acked under the attempt that ran them, within
seconds, and nothing runs twice. (A restart longer than most of a lease makes the worker fence itself
instead, and the rows come back by their lease: tests/faults/crashes/test_self_fencing.py.)

A private MariaDB, so the test may kill and restart it; real worker processes.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pymysql
import pytest

from duecast.shared.entries import Entry
from duecast.shared.settings import MySQLSettings
from tests.chaos.private_mariadb import PrivateMariaDB, running_with
from tests.faults.conftest import SESSION_LOST, FaultEnv

pytestmark = pytest.mark.faults

DATABASE = "restarts"
# The target was ~15 s; the kept outcomes are acked at the worker's next ack retry (1 s backoff
# at most) once the server answers. Measured: 0.1 s.
BACK_WITHIN_S = 10.0
ALLOW = (*SESSION_LOST, "NotConnected", "ConnectionRefusedError")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrivateMariaDB]:
    with running_with(tmp_path_factory.mktemp("mariadb"), DATABASE) as db:
        yield db


@pytest.fixture(scope="module")
def mysql_settings(server: PrivateMariaDB) -> MySQLSettings:
    """Overrides the session's: fault_env makes its table (and its processes connect) here."""
    return server.settings(DATABASE)


def _cursor(server: PrivateMariaDB) -> pymysql.cursors.Cursor:
    conn = pymysql.connect(
        host="127.0.0.1", port=server.port, user="root", database=DATABASE, autocommit=True
    )
    return conn.cursor()


@pytest.fixture
def sql(server: PrivateMariaDB) -> Iterator[pymysql.cursors.Cursor]:
    cur = _cursor(server)
    yield cur
    cur.connection.close()


def _on_private(env: FaultEnv, server: PrivateMariaDB) -> FaultEnv:
    env.env.update(
        {
            "DUECAST_MYSQL__HOST": "127.0.0.1",
            "DUECAST_MYSQL__PORT": str(server.port),
            "DUECAST_MYSQL__USER": "root",
            "DUECAST_MYSQL__PASSWORD": "",
            "DUECAST_MYSQL__CONNECT_TIMEOUT_S": "1",
            "DUECAST_WORKER__ERROR_BACKOFF_S": "1.0",  # the default pacing, not the fault suite's 0.1
        }
    )
    return env


def _lines(path: Path, words: str) -> int:
    return sum(words in line for line in path.read_text(errors="replace").splitlines())


def test_outcomes_whose_ack_met_a_restart_are_acked_once_mariadb_is_back(
    fault_env: Callable[..., FaultEnv], server: PrivateMariaDB
) -> None:
    env = _on_private(fault_env("rescan"), server)
    ids = env.insert(10)
    env.dispatch_directly(ids, attempt=1)
    env.push([Entry(i, 1) for i in ids])

    gate, marker = env.tmp / "gate", env.tmp / "batch.marker"
    worker = env.worker("worker", allow=ALLOW, DUECAST_TEST_GATE=gate, DUECAST_TEST_BATCH_MARKER=marker)
    assert env.wait_batch(marker).ids == set(ids)  # parked in its handler, the rows started

    server.kill()
    gate.touch()  # the handler returns; its ack meets a dead server, then a refused one
    env.wait_for(lambda: _lines(worker.log, "could not ack") > 1, "the worker to keep its outcomes and retry")

    server.start()
    back = time.monotonic()
    env.sql.connection.connect()  # the test's own session died with the server: the same object, anew
    env.wait_for(lambda: not env.pending(), "the kept outcomes to be acked", timeout=BACK_WITHIN_S)
    print(f"rows acked {time.monotonic() - back:.1f}s after MariaDB was back")
    assert worker.alive()
    verdict = env.verdict(ids)
    assert not verdict.lost
    assert not verdict.wrong_outcome
    assert not verdict.duplicates, "one execution per (id, attempt)"
    # Acked under the attempt that ran them: nothing ran again.
    assert env.column("checked_by_attempt") == dict.fromkeys(ids, 1)
