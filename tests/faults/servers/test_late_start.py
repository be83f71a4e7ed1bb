"""Issue 16.8: a job never starts once its lease may have run out. A `FLUSH TABLES WITH READ LOCK`
stalls a batch's start (its mark_running) past the whole lease; when the lock goes and the start
commits, the worker runs none of the batch (its handler never sees a row) and makes the jobs due
again at once, fenced, without using up an attempt; the next start runs each of them once.

A private MariaDB, so the test may take the global read lock.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator

import pymysql
import pytest

from duecast.admin import migrate
from duecast.shared.acks import Ack, Row
from duecast.shared.api.enqueue import Enqueuer
from duecast.shared.settings import JobsSettings, Settings
from duecast.shared.states import State
from duecast.shared.storage.db import Database
from duecast.shared.storage.leased.jobs import JobStore
from duecast.shared.storage.units import Cursor
from tests.chaos.private_mariadb import PrivateMariaDB, running_with
from tests.faults.procs import wait_for

pytestmark = pytest.mark.faults

DATABASE = "late_start"
LEASE_S = 4.0
N = 10


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrivateMariaDB]:
    with running_with(tmp_path_factory.mktemp("mariadb"), DATABASE) as db:
        yield db


@pytest.fixture(scope="module")
def settings(server: PrivateMariaDB) -> Settings:
    mysql = server.settings(DATABASE).model_copy(update={"lease_keeper_timeout_s": 0.5})
    made = Settings(mysql=mysql, jobs=JobsSettings(lease_s=LEASE_S))
    migrate.apply(made)
    return made


def _root(server: PrivateMariaDB) -> pymysql.cursors.Cursor:
    conn = pymysql.connect(
        host="127.0.0.1", port=server.port, user="root", database=DATABASE, autocommit=True
    )
    return conn.cursor()


def _stalled_sessions(cur: pymysql.cursors.Cursor) -> int:
    cur.execute(
        "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID <> CONNECTION_ID() "
        "AND STATE LIKE 'Waiting for %%lock%%'"
    )
    (count,) = cur.fetchone() or (0,)
    return int(count)


def test_a_start_stalled_past_its_lease_runs_no_handler(
    server: PrivateMariaDB,
    settings: Settings,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    jobs = settings.jobs
    store = JobStore(Database(settings.mysql), settings.source("jobs.default"), jobs, settings.mysql)
    enqueuer = Enqueuer(settings, None, None)
    ids = [int(enqueuer.enqueue("noop", {"n": i})) for i in range(N)]
    entries = store.claim_due(N)
    assert sorted(e.id for e in entries) == sorted(ids)

    ran: list[Row] = []  # what a handler would have been given: the worker runs only batch.rows
    started_s: list[float] = []

    def start() -> None:
        began = time.monotonic()
        with store.started(entries) as batch:
            started_s.append(time.monotonic() - began)
            for rows in batch.phases():
                ran.extend(rows)

    # The read lock is taken the moment the start has locked its rows, so what it stalls is the
    # start's mark_running and commit: after the lease clock began, as in the issue.
    root = _root(server)
    lock_rows = store._lock

    def lock_then_stall(cur: Cursor, where: str) -> list[Row]:
        rows = lock_rows(cur, where)
        root.execute("FLUSH TABLES WITH READ LOCK")
        return rows

    monkeypatch.setattr(store, "_lock", lock_then_stall)
    with caplog.at_level(logging.WARNING):
        starter = threading.Thread(target=start, name="stalled-start")
        starter.start()
        try:
            watcher = _root(server)
            wait_for(lambda: _stalled_sessions(watcher) > 0, 10, "the start to wait for the read lock")
            watcher.connection.close()
            time.sleep(LEASE_S + 1.0)  # the stall itself: the start's commit held past the whole lease
        finally:
            root.execute("UNLOCK TABLES")
        starter.join(30)
    assert not starter.is_alive()
    assert started_s[0] > LEASE_S  # the start did stall past its lease...
    assert ran == []  # ...and not one of its jobs reached a handler
    assert [r for r in caplog.records if getattr(r, "event", None) == "job.start_too_late"]

    # Given back at once, fenced, as Ack.retry(): due now, same attempt, no attempt used up, no lease.
    root.execute(
        f"SELECT dc_state, dc_attempt, lease_until IS NULL, run_at <= NOW(6) FROM `{jobs.table}` "
        "WHERE id IN %s",
        (tuple(ids),),
    )
    assert set(root.fetchall()) == {(int(State.IDLE), 1, 1, 1)}

    monkeypatch.undo()
    # The next start (any worker) runs every one of them, once.
    again = store.claim_due(N)
    assert sorted(e.id for e in again) == sorted(ids)
    assert {e.attempt for e in again} == {2}
    with store.started(again) as batch:
        assert sorted(int(r["id"]) for r in batch.rows) == sorted(ids)
        batch.ack([(row, Ack.default()) for row in batch.rows])
    root.connection.close()
