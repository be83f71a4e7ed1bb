"""Issue 16.12: the Enqueuer and the Publisher raise duecast's own documented errors for MySQL
failures (2003 refused, 2013 lost, 1290 read-only ...), never a PyMySQL error, and retry what is
safe: opening their own connection (nothing was sent yet), and a dead idle connection (pinged).

A private MariaDB, so the test may restart it and make it read-only without touching the shared one.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pymysql
import pytest

from duecast import Enqueuer, Publisher
from duecast.admin import migrate
from duecast.shared.settings import MySQLSettings, Settings
from duecast.shared.storage.db import connect
from duecast.shared.storage.outbox import CONNECT_RETRIES
from duecast.shared.storage.units import NotConnected, StorageError, TransientError
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


def test_an_unreachable_server_is_not_connected_after_retries_never_a_driver_error(
    caplog: pytest.LogCaptureFixture,
) -> None:
    mysql = MySQLSettings(host="127.0.0.1", port=free_port(), database=DATABASE, connect_timeout_s=1)
    writers = [Enqueuer(settings_for(mysql), None), Publisher(settings_for(mysql), None)]
    for write in (lambda: writers[0].enqueue("t"), lambda: writers[1].publish("orders", {})):
        caplog.clear()
        with caplog.at_level(logging.WARNING, "duecast.outbox"), pytest.raises(NotConnected) as caught:
            write()
        assert_ours(caught.value)
        assert isinstance(caught.value, TransientError)
        assert caught.value.code == 2003
        assert f"127.0.0.1:{mysql.port}" in str(caught.value)
        retried = [r for r in caplog.records if getattr(r, "event", None) == "outbox.connect_retried"]
        assert len(retried) == CONNECT_RETRIES


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
    assert not [r for r in caplog.records if getattr(r, "event", None) == "outbox.connect_retried"]
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
    enqueuer, publisher = Enqueuer(settings, None), Publisher(settings, None)
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
        with pytest.raises(TransientError) as commit_lost, publisher.transaction(theirs):
            pass  # the COMMIT meets the dead connection
        assert_ours(commit_lost.value)
    finally:
        server.start()
        theirs.close()
    assert enqueuer.enqueue("t") > 0
    assert publisher.publish("orders", {}) > 0
