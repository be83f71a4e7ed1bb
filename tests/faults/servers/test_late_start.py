"""Issue 16.8: a job never starts once its lease may have run out. A `FLUSH TABLES WITH READ LOCK`
stalls a batch's start (its commit) past the whole lease; when the lock goes and the start
commits, the worker runs none of the batch (its handler never sees a row) and makes the jobs' run
pending again at once, fenced, without using up an attempt of any job; the next start runs each of
them once.

A private MariaDB, so the test may take the global read lock.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator

import pymysql
import pytest

from duecast.shared.acks import Ack, Row
from duecast.shared.api.enqueue import Enqueuer
from duecast.shared.settings import JobsSettings, Settings
from duecast.shared.states import State
from duecast.shared.storage.admin import migrate
from duecast.shared.storage.db import Database
from duecast.shared.storage.leased.jobs import JobStore
from duecast.shared.storage.units import Cursor
from tests.chaos.private_mariadb import PrivateMariaDB, running_with
from tests.faults.procs import wait_for
from tests.faults.runs import runs

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
    (first,) = runs(_root(server), jobs)  # one run holds them all, dispatched under attempt 1
    assert [(e.id, e.attempt) for e in entries] == [(first.id, 1)]
    assert first.members == set(ids)

    ran: list[Row] = []  # what a handler would have been given: the worker runs only batch.rows
    started_s: list[float] = []

    def start() -> None:
        began = time.monotonic()
        with store.started(entries) as batch:
            started_s.append(time.monotonic() - began)
            for rows in batch.phases():
                ran.extend(rows)

    # The read lock is taken the moment the start has locked its run and marked it running (its
    # members are read next), so what it stalls is the start's commit: after the lease clock began,
    # as in the issue.
    root = _root(server)
    read_members = store._read_members

    def read_then_stall(cur: Cursor, members: list[int]) -> list[Row]:
        rows = read_members(cur, members)
        root.execute("FLUSH TABLES WITH READ LOCK")
        return rows

    monkeypatch.setattr(store, "_read_members", read_then_stall)
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

    # Given back at once, fenced, as Ack.retry(): the run pending again, no lease, its members whole;
    # the jobs' rows untouched: due now, no run of them ended, so no attempt used up.
    root.execute(
        f"SELECT dc_state, dc_attempt, lease_until IS NULL FROM `{jobs.runs_table}` WHERE id = %s",
        (first.id,),
    )
    assert root.fetchall() == ((int(State.IDLE), 1, 1),)
    assert runs(root, jobs)[0].members == set(ids)
    root.execute(
        f"SELECT dc_state, dc_attempt, run_at <= NOW(6) FROM `{jobs.table}` WHERE id IN %s", (tuple(ids),)
    )
    assert set(root.fetchall()) == {(int(State.IDLE), 0, 1)}

    monkeypatch.undo()
    # The next start (any worker) runs every one of them, once: the same run, dispatched again
    # under attempt 2, each job still at its first attempt.
    again = store.claim_due(N)
    assert [(e.id, e.attempt) for e in again] == [(first.id, 2)]
    with store.started(again) as batch:
        assert sorted(int(r["id"]) for r in batch.rows) == sorted(ids)
        assert {int(r["dc_attempt"]) for r in batch.rows} == {1}
        batch.ack([(row, Ack.default()) for row in batch.rows])
    assert runs(root, jobs) == []
    root.execute(f"SELECT COUNT(*) FROM `{jobs.table}` WHERE id IN %s", (tuple(ids),))
    assert root.fetchall() == ((0,),)
    root.connection.close()
