"""Issue 16.10: the leader's lease and duties survive a reconnect. After a connection KILL or a
MariaDB restart the leader keeps its lease (a failed renewal leaves what the database granted
before in force, and a renewal is retried at once on a new connection), and a duty whose session
died runs again at once instead of failing with a traceback until its next interval.

A private MariaDB, so the test may restart it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator

import pymysql
import pytest

from duecast.dispatcher.leader import Leadership
from duecast.dispatcher.pruner import Pruner
from duecast.dispatcher.scheduler import _guarded
from duecast.shared.settings import Settings
from duecast.shared.storage.admin import migrate
from duecast.shared.storage.db import Database
from duecast.shared.storage.leased.jobs import JobStore
from duecast.shared.storage.leases import LeaseStore
from tests.chaos.private_mariadb import PrivateMariaDB, running_with

pytestmark = pytest.mark.faults

DATABASE = "leaders"
LEASE_S = 15.0


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrivateMariaDB]:
    with running_with(tmp_path_factory.mktemp("mariadb"), DATABASE) as db:
        yield db


@pytest.fixture(scope="module")
def settings(server: PrivateMariaDB) -> Settings:
    made = Settings(mysql=server.settings(DATABASE).model_copy(update={"connect_timeout_s": 1.0}))
    migrate.apply(made)
    return made


@pytest.fixture(autouse=True)
def no_leader(server: PrivateMariaDB, settings: Settings) -> None:
    """Each test starts with the lease free, whatever the one before left."""
    root = pymysql.connect(
        host="127.0.0.1", port=server.port, user="root", database=DATABASE, autocommit=True
    )
    try:
        with root.cursor() as cur:
            cur.execute(f"DELETE FROM `{settings.dispatcher.leases_table}`")
    finally:
        root.close()


def leadership(settings: Settings, holder: str) -> Leadership:
    return Leadership(LeaseStore(Database(settings.mysql), settings.dispatcher.leases_table), LEASE_S, holder)


def session_of(db: Database) -> int:
    with db.transaction() as cur:
        cur.execute("SELECT CONNECTION_ID()")
        row = cur.fetchone()
    assert row is not None
    return int(row[0])


def kill(server: PrivateMariaDB, session: int) -> None:
    root = pymysql.connect(host="127.0.0.1", port=server.port, user="root", autocommit=True)
    try:
        with root.cursor() as cur:
            cur.execute(f"KILL {session}")
    finally:
        root.close()


def errors(caplog: pytest.LogCaptureFixture) -> list[str]:
    """ERROR records and any record carrying a traceback: none is expected of a reconnect."""
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]


class Duty:
    """The real pruner, run as the scheduler runs a duty; counts the runs that finished."""

    def __init__(self, settings: Settings) -> None:
        store = JobStore(
            Database(settings.mysql), settings.jobs.queue_sources()[0], settings.jobs, settings.mysql
        )
        self.pruner = Pruner(store, settings.jobs.prune_batch, settings.jobs.prune_interval_s)
        self.finished = 0
        self.run = _guarded("duecast-pruner", self._prune, threading.Event())

    def _prune(self) -> None:
        self.pruner.prune_all()
        self.finished += 1


def test_a_killed_session_costs_neither_the_lease_nor_a_duty_run(
    server: PrivateMariaDB, settings: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    leader, standby = leadership(settings, "leader-kill"), leadership(settings, "standby-kill")
    duty = Duty(settings)
    leader.tick()
    standby.tick()
    duty.run()
    assert (leader.held(), standby.held(), duty.finished) == (True, False, 1)
    with caplog.at_level(logging.WARNING):
        kill(server, session_of(leader.store.db))
        kill(server, session_of(duty.pruner.store.db))
        leader.tick()
        duty.run()
    assert leader.held()
    assert duty.finished == 2  # ran again at once, on a new connection
    assert errors(caplog) == []
    retried = [
        r for r in caplog.records if getattr(r, "event", None) in {"leader.renew_retried", "duty.retried"}
    ]
    assert len(retried) == 2, [r.getMessage() for r in retried]  # one line each
    assert not [r for r in caplog.records if getattr(r, "event", None) == "leader.renew_failed"]
    leader.resign()


def test_a_mariadb_restart_keeps_the_lease_and_the_duties_run_once_it_is_back(
    server: PrivateMariaDB, settings: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    leader = leadership(settings, "leader-restart")
    duty = Duty(settings)
    leader.tick()
    duty.run()
    assert leader.held()
    with caplog.at_level(logging.WARNING):
        server.kill()
        try:
            leader.tick()  # the server is down: the renewal fails, what was granted still holds
            held_while_down = leader.held()
        finally:
            server.start()
        assert held_while_down
        back = time.monotonic()
        leader.tick()
        renewed_s = time.monotonic() - back
        duty.run()
    assert leader.held()
    assert renewed_s < 2.0, f"the first renewal after the restart took {renewed_s:.1f}s"
    assert duty.finished == 2
    assert errors(caplog) == []
    failed = [r.getMessage() for r in caplog.records if getattr(r, "event", None) == "leader.renew_failed"]
    assert len(failed) == 1, failed
    assert "acting on the last renewal" in failed[0]
    leader.resign()


def test_a_leader_that_cannot_renew_acts_on_its_last_grant_and_stops_before_it_runs_out(
    settings: Settings,
) -> None:
    lease_s = 3.0
    leader = Leadership(
        LeaseStore(Database(settings.mysql), settings.dispatcher.leases_table),
        lease_s=lease_s,
        holder="short",
    )
    granted_at = time.monotonic()
    leader.tick()
    assert leader.held()

    def unreachable(*_args: object) -> float:
        raise pymysql.err.OperationalError(2003, "Can't connect to MySQL server")

    leader.store.acquire = unreachable  # type: ignore[method-assign]
    leader.tick()  # retried, then given up: about 0.7 s
    assert leader.held()  # still inside 0.8 of what the database granted
    deadline = granted_at + lease_s
    while leader.held() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not leader.held()
    assert time.monotonic() - granted_at <= 0.8 * lease_s + 0.1  # never past its share of the lease
