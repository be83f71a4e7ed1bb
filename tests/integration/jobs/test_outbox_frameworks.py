"""The transactional outbox in the caller's framework, on both MySQL drivers (PyMySQL, mysqlclient):
Django's atomic() and SQLAlchemy's Session and Connection, committed and rolled back. A job exists if
and only if the caller's transaction committed, duecast never commits or rolls back theirs, the
dispatcher is woken at their commit, and the committed jobs run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator

import pymysql
import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Session

from duecast import DuecastError, DuplicateJob, Enqueuer, Job
from duecast.dispatcher.main import serve as serve_dispatcher
from duecast.shared.fanout.client import connect_redis
from duecast.shared.settings import MySQLSettings, RedisSettings, Settings
from duecast.shared.storage.admin import migrate
from duecast.shared.storage.db import connect
from duecast.worker.main import serve as serve_worker
from tests.integration import jobs_app

pytestmark = pytest.mark.integration

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
DRIVERS = {"pymysql": "pymysql", "mysqlclient": "mysqldb"}  # ours -> SQLAlchemy's dialect driver


class Boom(Exception):
    pass


@pytest.fixture
def settings(
    mysql_settings: MySQLSettings, redis_settings: RedisSettings, sql: pymysql.cursors.Cursor
) -> Iterator[Settings]:
    table = f"jobs_{uuid.uuid4().hex[:8]}"
    s = Settings(
        mysql=mysql_settings,
        redis=redis_settings,
        jobs={"table": table, "schedules_table": f"{table}_s"},  # type: ignore[arg-type]
        worker={"app": "tests.integration.jobs_app"},  # type: ignore[arg-type]
    )
    migrate.apply(s)
    sql.execute(f"CREATE TABLE `{table}_biz` (id BIGINT AUTO_INCREMENT PRIMARY KEY, note VARCHAR(64))")
    jobs_app.RUNS.clear()
    yield s
    tables = ", ".join(f"`{table}{end}`" for end in ("", "_s", "_runs", "_cursors", "_biz"))
    sql.execute(f"DROP TABLE IF EXISTS {tables}")


@pytest.fixture
def enqueuer(settings: Settings) -> Iterator[Enqueuer]:
    enqueuer = Enqueuer(settings, connect_redis(settings.redis), tasks=jobs_app.handlers.task_names)
    yield enqueuer
    enqueuer.close()


def engine(mysql: MySQLSettings, driver: str) -> sa.Engine:
    url = sa.URL.create(
        f"mysql+{DRIVERS[driver]}",
        username=mysql.user,
        password=mysql.password.get_secret_value(),
        host=mysql.host,
        port=mysql.port,
        database=mysql.database,
    )
    return sa.create_engine(url, poolclass=sa.NullPool)


def state(sql: pymysql.cursors.Cursor, settings: Settings) -> tuple[list[object], list[str]]:
    """(the payloads of the jobs table, the business rows' notes)."""
    table = settings.jobs.table
    sql.execute(f"SELECT payload FROM `{table}` ORDER BY id")
    payloads = [json.loads(p) for (p,) in sql.fetchall()]
    sql.execute(f"SELECT note FROM `{table}_biz` ORDER BY id")
    return payloads, [n for (n,) in sql.fetchall()]


def drained(settings: Settings) -> list[object]:
    serve_dispatcher(settings, threading.Event(), drain=True)
    serve_worker(settings, threading.Event(), drain=True)
    return sorted((p for p, _ in jobs_app.RUNS), key=json.dumps)


def woken(enqueuer: Enqueuer) -> int:
    assert enqueuer.client is not None
    return int(enqueuer.client.llen(enqueuer.keys.wake()))  # type: ignore[arg-type]


@pytest.mark.parametrize("driver", list(DRIVERS))
def test_sqlalchemy_session_and_connection(
    driver: str, settings: Settings, enqueuer: Enqueuer, sql: pymysql.cursors.Cursor
) -> None:
    biz = f"`{settings.jobs.table}_biz`"
    eng = engine(settings.mysql, driver)
    assert enqueuer.client is not None
    enqueuer.client.delete(enqueuer.keys.wake())
    with Session(eng) as session, session.begin():
        session.execute(sa.text(f"INSERT INTO {biz} (note) VALUES ('session-commit')"))
        enqueuer.enqueue("record", {"session": "commit"}, conn=session)
        assert woken(enqueuer) == 0, "woken before the caller's commit"
        driver_module = type(session.connection().connection.dbapi_connection).__module__
    assert woken(enqueuer) == 1, "not woken at the session's commit"
    assert driver_module.lower().startswith(DRIVERS[driver])
    with pytest.raises(Boom):
        in_session_then_fail(eng, enqueuer, biz)
    enqueuer.client.delete(enqueuer.keys.wake())
    with eng.begin() as c:
        c.execute(sa.text(f"INSERT INTO {biz} (note) VALUES ('connection-commit')"))
        enqueuer.enqueue_many([Job("record", {"connection": "commit"})], conn=c)
        assert woken(enqueuer) == 0, "woken before the caller's commit"
    assert woken(enqueuer) == 1, "not woken at the connection's commit"
    with pytest.raises(Boom):
        in_connection_then_fail(eng, enqueuer, biz)
    with eng.connect() as c:  # SQLAlchemy's commit-as-you-go: the job waits for the caller's commit()
        enqueuer.enqueue("record", {"connection": "commit-as-you-go"}, conn=c)
        assert state(sql, settings)[0] == [{"session": "commit"}, {"connection": "commit"}]
        c.commit()
    payloads, notes = state(sql, settings)
    committed = [{"session": "commit"}, {"connection": "commit"}, {"connection": "commit-as-you-go"}]
    assert payloads == committed
    assert notes == ["session-commit", "connection-commit"]
    assert drained(settings) == sorted(committed, key=json.dumps)


def in_session_then_fail(eng: sa.Engine, enqueuer: Enqueuer, biz: str) -> None:
    with Session(eng) as session, session.begin():
        session.execute(sa.text(f"INSERT INTO {biz} (note) VALUES ('session-rollback')"))
        enqueuer.enqueue("record", {"session": "rollback"}, conn=session)
        raise Boom


def in_connection_then_fail(eng: sa.Engine, enqueuer: Enqueuer, biz: str) -> None:
    with eng.begin() as c:
        c.execute(sa.text(f"INSERT INTO {biz} (note) VALUES ('connection-rollback')"))
        enqueuer.enqueue("record", {"connection": "rollback"}, conn=c)
        raise Boom


@pytest.mark.parametrize("driver", list(DRIVERS))
def test_django_atomic(driver: str, settings: Settings, sql: pymysql.cursors.Cursor) -> None:
    mysql = settings.mysql
    env = {
        **os.environ,
        "DUECAST_MYSQL__HOST": mysql.host,
        "DUECAST_MYSQL__PORT": str(mysql.port),
        "DUECAST_MYSQL__USER": mysql.user,
        "DUECAST_MYSQL__PASSWORD": mysql.password.get_secret_value(),
        "DUECAST_MYSQL__DATABASE": mysql.database,
        "DUECAST_REDIS__KEY_PREFIX": settings.redis.key_prefix,
        "DUECAST_JOBS__TABLE": settings.jobs.table,
        "DUECAST_JOBS__SCHEDULES_TABLE": settings.jobs.schedules_table,
        "OUTBOX_TABLE": f"{settings.jobs.table}_biz",
    }
    done = subprocess.run(
        [sys.executable, "-m", "tests.integration.jobs.django_outbox", driver],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["driver"].lower().startswith(DRIVERS[driver]), seen
    assert (seen["woken_before_commit"], seen["woken_after_commit"], seen["woken_autocommit"]) == (0, 1, 1)
    assert seen["wakes_owed"] == 1  # one wake-up at the commit, however many writes
    payloads, notes = state(sql, settings)
    committed = [
        {"django": driver, "case": "commit"},
        {"django": driver, "case": "commit, again"},
        {"django": driver, "case": "autocommit"},
    ]
    assert payloads == committed
    assert notes == ["django-commit"]
    assert drained(settings) == sorted(committed, key=json.dumps)


@pytest.mark.parametrize("driver", list(DRIVERS))
def test_a_plain_driver_connection_or_cursor_is_never_committed(
    driver: str, settings: Settings, enqueuer: Enqueuer, sql: pymysql.cursors.Cursor
) -> None:
    """PyMySQL's and mysqlclient's own connections and cursors: duecast writes in the caller's
    transaction and leaves its end to them; their errors come out as duecast's."""
    with engine(settings.mysql, driver).connect() as c:
        raw = c.connection.dbapi_connection
        assert raw is not None
        cur = raw.cursor()
        enqueuer.enqueue("record", {"raw": "rolled back"}, conn=raw)
        enqueuer.enqueue("record", {"cursor": "rolled back"}, conn=cur)
        raw.rollback()
        enqueuer.enqueue("record", {"cursor": "committed"}, conn=cur)
        assert state(sql, settings)[0] == []
        raw.commit()
        enqueuer.enqueue("record", {"unique": 1}, unique_key="k", conn=cur)
        with pytest.raises(DuplicateJob):  # the driver's IntegrityError 1062, as duecast's
            enqueuer.enqueue("record", {"unique": 2}, unique_key="k", conn=raw)
        assert enqueuer.enqueue("record", {"unique": 3}, unique_key="k", on_duplicate="keep", conn=raw).merged
        nope = settings.model_copy(update={"jobs": settings.jobs.model_copy(update={"table": "nope"})})
        with pytest.raises(DuecastError, match="1146"):  # the driver's ProgrammingError, as duecast's
            Enqueuer(nope, None).enqueue("record", None, conn=raw)
        raw.rollback()
    assert state(sql, settings)[0] == [{"cursor": "committed"}]


def test_the_old_transaction_block_refuses_in_one_line(enqueuer: Enqueuer, settings: Settings) -> None:
    conn = connect(settings.mysql)
    try:
        with pytest.raises(DuecastError, match=r"pass conn= to enqueue") as refused:
            enqueuer.transaction(conn)
        assert "\n" not in str(refused.value)
    finally:
        conn.close()


def test_conn_of_another_kind_is_refused_in_one_line(enqueuer: Enqueuer) -> None:
    with pytest.raises(DuecastError, match=r"conn= takes a PyMySQL or mysqlclient .* not a builtins.str"):
        enqueuer.enqueue("record", None, conn="not a connection")
