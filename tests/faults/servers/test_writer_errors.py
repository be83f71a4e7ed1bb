"""Issue 16.12: the Enqueuer and the Publisher raise duecast's own documented errors for MySQL
failures (2003 refused, 2013 lost, 1290 read-only ...), never a PyMySQL error, and retry what is
safe for mysql.writer_retry_s: a unit that failed before its COMMIT was sent (the server down or
restarting, a lock wait timeout, a connection lost mid-write), and a dead idle connection (pinged);
never a failed COMMIT.

A private MariaDB, so the test may restart it and make it read-only without touching the shared one.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator

import pymysql
import pytest

from duecast import Enqueuer, Publisher
from duecast.shared.api.enqueue import Job, encode
from duecast.shared.settings import MySQLSettings, Settings
from duecast.shared.storage.admin import migrate
from duecast.shared.storage.db import connect
from duecast.shared.storage.units import Cursor, NotConnected, StorageError, TransientError
from tests.chaos.private_mariadb import PrivateMariaDB
from tests.faults.private_redis import free_port

pytestmark = pytest.mark.faults

DATABASE = "writers"
USER, PASSWORD = "writer", "writer-pw"  # not root: read_only does not bind a SUPER user


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrivateMariaDB]:
    db = PrivateMariaDB(tmp_path_factory.mktemp("mariadb"))
    db.start()
    root = pymysql.connect(host="127.0.0.1", port=db.port, user="root", autocommit=True)
    with root.cursor() as cur:
        cur.execute(f"CREATE DATABASE {DATABASE}")
        cur.execute(f"CREATE USER '{USER}'@'%' IDENTIFIED BY '{PASSWORD}'")
        cur.execute(f"GRANT ALL ON {DATABASE}.* TO '{USER}'@'%'")
    root.close()
    yield db
    db.kill()


def settings_for(mysql: MySQLSettings) -> Settings:
    return Settings(
        mysql=mysql,
        topics={"names": ["orders"]},  # type: ignore[arg-type]
    )


@pytest.fixture(scope="module")
def settings(server: PrivateMariaDB) -> Settings:
    mysql = MySQLSettings(
        host="127.0.0.1",
        port=server.port,
        user=USER,
        password=PASSWORD,
        database=DATABASE,
        connect_timeout_s=2,
    )
    made = settings_for(mysql)
    migrate.apply(made.model_copy(update={"mysql": server.settings(DATABASE)}))
    return made


def root_sql(server: PrivateMariaDB, stmt: str) -> list[tuple[object, ...]]:
    conn = connect(server.settings(DATABASE))
    conn.autocommit(True)
    try:
        with conn.cursor() as cur:
            cur.execute(stmt)
            return list(cur.fetchall())
    finally:
        conn.close()


def assert_ours(exc: BaseException) -> None:
    assert not isinstance(exc, pymysql.err.MySQLError), repr(exc)
    assert isinstance(exc, StorageError), repr(exc)


def retried(caplog: pytest.LogCaptureFixture) -> int:
    return len([r for r in caplog.records if getattr(r, "event", None) == "outbox.retried"])


def test_an_unreachable_server_is_not_connected_after_retrying_for_writer_retry_s(
    caplog: pytest.LogCaptureFixture,
) -> None:
    budget_s = 1.5
    mysql = MySQLSettings(
        host="127.0.0.1", port=free_port(), database=DATABASE, connect_timeout_s=1, writer_retry_s=budget_s
    )
    writers = [Enqueuer(settings_for(mysql), None), Publisher(settings_for(mysql), None)]
    for write in (lambda: writers[0].enqueue("t"), lambda: writers[1].publish("orders", {})):
        caplog.clear()
        began = time.monotonic()
        with caplog.at_level(logging.WARNING, "duecast.outbox"), pytest.raises(NotConnected) as caught:
            write()
        took = time.monotonic() - began
        assert_ours(caught.value)
        assert isinstance(caught.value, TransientError)
        assert caught.value.code == 2003
        assert f"127.0.0.1:{mysql.port}" in str(caught.value)
        assert retried(caplog) >= 2
        # Retried within the budget, then given up when the next (jittered, doubling) delay would
        # pass it: after delays of at least half of each step, that is never before a third of the
        # budget (budget / 2 was no bound: spent 0.74 s + a next delay of 0.8 s gave up, in CI).
        assert budget_s / 3 <= took <= budget_s + 0.5


def test_a_read_only_server_refuses_with_storage_error_1290_not_retried(
    server: PrivateMariaDB, settings: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    enqueuer, publisher = Enqueuer(settings, None), Publisher(settings, None)
    publisher.publish("orders", {"warm": True})  # resolves the topic id before the server turns
    root_sql(server, "SET GLOBAL read_only = 1")
    try:
        for write in (lambda: enqueuer.enqueue("t"), lambda: publisher.publish("orders", {})):
            with caplog.at_level(logging.WARNING, "duecast.outbox"), pytest.raises(StorageError) as caught:
                write()
            assert_ours(caught.value)
            assert caught.value.code == 1290
            assert not isinstance(caught.value, TransientError)
    finally:
        root_sql(server, "SET GLOBAL read_only = 0")
    assert not retried(caplog)
    assert enqueuer.enqueue("t") > 0  # and writes again once the server does


def test_a_killed_idle_connection_is_replaced_before_the_write(
    server: PrivateMariaDB, settings: Settings
) -> None:
    enqueuer = Enqueuer(settings, None)
    first = enqueuer.enqueue("t")
    with enqueuer.db.transaction() as cur:
        cur.execute("SELECT CONNECTION_ID()")
        session = cur.fetchone()
    assert session is not None
    root_sql(server, f"KILL {int(session[0])}")
    second = enqueuer.enqueue("t")  # pinged, reconnected, written once
    rows = root_sql(server, f"SELECT COUNT(*) FROM duecast_jobs WHERE id IN ({first}, {second})")
    assert rows == [(2,)]


def test_a_server_restart_and_the_callers_own_connection(server: PrivateMariaDB, settings: Settings) -> None:
    mysql = settings.mysql.model_copy(update={"writer_retry_s": 0.5})
    impatient = settings.model_copy(update={"mysql": mysql})
    enqueuer, publisher = Enqueuer(impatient, None), Publisher(settings, None)
    publisher.publish("orders", {})
    theirs = connect(settings.mysql)  # the caller's transaction (transactional outbox)
    server.kill()
    try:
        with pytest.raises(NotConnected) as refused:
            enqueuer.enqueue("t")
        assert_ours(refused.value)
        for write in (
            lambda: enqueuer.enqueue("t", conn=theirs),
            lambda: publisher.publish("orders", {}, conn=theirs),
        ):
            with pytest.raises(TransientError) as lost:
                write()
            assert_ours(lost.value)
    finally:
        server.start()
        theirs.close()
    assert enqueuer.enqueue("t") > 0
    assert publisher.publish("orders", {}) > 0


def test_an_enqueue_rides_out_a_mariadb_restart_and_writes_once(
    server: PrivateMariaDB, settings: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    """The server is down for a few seconds (then InnoDB recovery): each write waits it out, within
    mysql.writer_retry_s (30 s by default), and lands once."""
    enqueuer, publisher = Enqueuer(settings, None), Publisher(settings, None)
    publisher.publish("orders", {})
    before = root_sql(server, "SELECT COUNT(*) FROM duecast_jobs")[0][0]
    back_at: list[float] = []

    def restart_later() -> None:
        time.sleep(2.0)  # down this long, then a crash recovery
        server.start()
        back_at.append(time.monotonic())

    server.kill()
    restarter = threading.Thread(target=restart_later)
    restarter.start()
    try:
        with caplog.at_level(logging.WARNING, "duecast.outbox"):
            job = enqueuer.enqueue("t")
            ids = enqueuer.enqueue_many([Job("t", 1), Job("t", 2)])
            message = publisher.publish("orders", {"after": "restart"})
        landed = time.monotonic()
    finally:
        restarter.join()
    assert retried(caplog) >= 2
    assert job > 0
    assert len(ids) == 2
    assert message > 0
    after = root_sql(server, "SELECT COUNT(*) FROM duecast_jobs")[0][0]
    assert after == before + 3  # each written once
    print(f"writes landed {landed - back_at[0]:.2f}s after MariaDB answered again")
    assert landed - back_at[0] < 3.0  # backoff capped at 1 s


def test_a_failure_before_the_commit_is_retried_one_at_the_commit_is_not(
    server: PrivateMariaDB, settings: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    """A connection killed mid-write (nothing committed) is written again, once; one killed after
    the writes, so that its COMMIT fails, reaches the caller: that COMMIT might have landed."""
    enqueuer = Enqueuer(settings, None)
    tries: list[int] = []

    def kill_own(cur: Cursor) -> None:
        cur.execute("SELECT CONNECTION_ID()")
        row = cur.fetchone()
        assert row is not None
        root_sql(server, f"KILL {int(row[0])}")

    def killed_mid_write(cur: Cursor) -> int:
        tries.append(1)
        if len(tries) == 1:
            kill_own(cur)  # the INSERT below meets the dead connection: nothing was committed
        return enqueuer.write(cur, [encode(Job("mid"), settings.jobs, None)], "error").last_id

    with caplog.at_level(logging.WARNING, "duecast.outbox"):
        enqueuer.on_own_connection(killed_mid_write, "enqueue")
    assert len(tries) == 2
    assert retried(caplog) == 1
    assert root_sql(server, "SELECT COUNT(*) FROM duecast_jobs WHERE task = 'mid'") == [(1,)]

    def killed_before_commit(cur: Cursor) -> int:
        tries.append(1)
        written = enqueuer.write(cur, [encode(Job("late"), settings.jobs, None)], "error").last_id
        kill_own(cur)
        return written

    caplog.clear()
    tries.clear()
    with caplog.at_level(logging.WARNING, "duecast.outbox"), pytest.raises(TransientError) as caught:
        enqueuer.on_own_connection(killed_before_commit, "enqueue")
    assert_ours(caught.value)
    assert len(tries) == 1
    assert not retried(caplog)
    assert root_sql(server, "SELECT COUNT(*) FROM duecast_jobs WHERE task = 'late'") == [(0,)]
