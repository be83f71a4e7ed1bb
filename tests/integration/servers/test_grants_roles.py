"""sql/grants.sql's accounts beyond the queue's core (issue 25): topics under the dispatcher, worker
and publisher accounts, `duecast enqueue` as the enqueuer, the read-only dashboard account, the
worker's column grants on the jobs table, and a missing grant named as such.

Each role runs through its production wiring under its own account; each forbidden act is refused
with access denied. Accounts and the database are the run's own (grants_env), dropped after.
"""

from __future__ import annotations

import threading

import pymysql
import pytest

from duecast import cli
from duecast.cli.history import History
from duecast.cli.sampler import Sampler
from duecast.cli.web.app import create_app
from duecast.cli.web.context import WebContext
from duecast.dispatcher import main as dispatcher_main
from duecast.shared.api.enqueue import Enqueuer
from duecast.shared.api.publish import Publisher
from duecast.shared.fanout.client import connect_redis
from duecast.shared.states import State
from duecast.shared.storage.db import Database, connect
from duecast.shared.storage.schema import SchemaError
from duecast.shared.storage.source_store import SourceStore
from duecast.shared.storage.topic_schema import check_topic_tables
from duecast.worker import main as worker_main
from tests.integration import apps, range_app, topics_app
from tests.integration.servers.grants_env import Granted
from tests.integration.topics.topics_env import APP as TOPICS_APP

pytestmark = pytest.mark.integration

TOKEN = "grants-token-0123456789"


def dead_job(roles: Granted) -> int:
    roles.sql.execute(
        "INSERT INTO duecast_jobs (task, payload, dc_state, errors, last_error, finished_at) "
        "VALUES ('record', 'null', %s, 1, 'RuntimeError: boom', NOW(6))",
        (int(State.DEAD),),
    )
    return int(roles.sql.lastrowid or 0)


def test_topics_run_under_the_publisher_dispatcher_and_worker_accounts(roles: Granted) -> None:
    topics_app.RUNS.clear()
    publisher = Publisher(roles.settings("publisher"), connect_redis(roles.redis))
    try:
        ids = [publisher.publish("orders", {"n": n}, key=f"o:{n}") for n in range(5)]
    finally:
        publisher.db.close()
    dispatcher = roles.settings("dispatcher", dispatcher={"poll_interval_s": 0.05}, jobs={"enabled": False})
    dispatcher_main.serve(dispatcher, threading.Event(), drain=True)
    worker = roles.settings(
        "worker", worker={"app": TOPICS_APP, "block_timeout_s": 0.1}, jobs={"enabled": False}
    )
    counts = worker_main.serve(worker, threading.Event(), drain=True).counts
    assert counts["failed"] == 0, counts
    for group in ("billing", "shipping", "audit", "cache"):
        assert sorted(topics_app.runs(group)) == ids, group
    # The publisher adds messages and moves its topic's last id; nothing else.
    for stmt in (
        "SELECT payload FROM duecast_messages",
        "UPDATE duecast_messages SET payload = 'null'",
        "DELETE FROM duecast_messages",
        "UPDATE duecast_topics SET name = 'x'",
        "DELETE FROM duecast_topics",
        "SELECT * FROM duecast_deliveries",
        "UPDATE duecast_groups SET position = 0",
        "INSERT INTO duecast_attempts (group_id, seq, attempt, outcome) VALUES (1, 1, 1, 'x')",
        "SELECT id FROM duecast_jobs",
    ):
        roles.refused("publisher", stmt)
    # The worker reads messages; it never writes or deletes one.
    for stmt in ("DELETE FROM duecast_messages", "UPDATE duecast_messages SET payload = 'null'"):
        roles.refused("worker", stmt)


def test_a_missing_grant_is_named_as_access_denied_not_as_a_missing_table(roles: Granted) -> None:
    settings = roles.settings("dispatcher")
    user = settings.mysql.user
    roles.sql.execute(f"REVOKE SELECT, INSERT ON `{roles.database}`.`duecast_topics` FROM %s@'%%'", (user,))
    try:
        with pytest.raises(SchemaError) as info:
            dispatcher_main.serve(settings, threading.Event(), drain=True)
    finally:
        roles.sql.execute(f"GRANT SELECT, INSERT ON `{roles.database}`.`duecast_topics` TO %s@'%%'", (user,))
    said = str(info.value)
    roles.sql.execute(
        f"REVOKE SELECT, UPDATE ON `{roles.database}`.`user_block_status` FROM %s@'%%'", (user,)
    )
    store = SourceStore(Database(settings.mysql), settings.sources[0])
    try:
        with pytest.raises(
            SchemaError, match=r"table user_block_status: access denied to this account \(grant"
        ):
            store.verify()
    finally:
        store.db.close()
        roles.sql.execute(
            f"GRANT SELECT, UPDATE ON `{roles.database}`.`user_block_status` TO %s@'%%'", (user,)
        )
    assert "duecast_topics: access denied" in said, said
    assert "(grant its role's privileges: sql/grants.sql" in said, said
    # A table that is really missing, seen by an account that may look: as before.
    missing = roles.settings("migrate", topics={"names": ["orders"], "table_prefix": "nothere_"}).topics
    with pytest.raises(SchemaError, match=r"nothere_topics is missing; run `duecast migrate`"):
        check_topic_tables(roles.sql, missing)


def test_a_worker_may_write_only_duecasts_own_columns_of_a_job(roles: Granted) -> None:
    roles.sql.execute(
        "INSERT INTO duecast_jobs (task, payload, unique_key, unique_slot) VALUES ('record', '1', 'w', 'w')"
    )
    job = int(roles.sql.lastrowid or 0)
    try:
        for column, value in (
            ("task", "'fail'"),
            ("payload", '\'{"msg":"hijacked"}\''),
            ("queue", "'mail'"),
            ("unique_key", "'other'"),
            ("priority", "9"),
            ("max_attempts", "1000"),
            ("schedule", "'nightly'"),
            ("id", "id + 1000000"),
        ):
            assert (
                roles.refused("worker", f"UPDATE duecast_jobs SET {column} = {value} WHERE id = {job}")
                == 1143
            )
        roles.sql.execute("SELECT task, payload, queue, unique_key FROM duecast_jobs WHERE id = %s", (job,))
        assert roles.sql.fetchone() == ("record", "1", "default", "w")
    finally:
        roles.sql.execute("DELETE FROM duecast_jobs WHERE id = %s", (job,))


def test_duecast_enqueue_as_the_enqueuer_account(
    roles: Granted, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    settings = roles.settings("enqueuer")
    monkeypatch.setattr("duecast.cli.enqueue.load_settings", lambda config=None: settings)
    # The default check reads the worker registry, which this account may not: one line says so.
    assert cli.main(["enqueue", "record", "--unique-key", "cli-once"]) == 0
    out, err = capsys.readouterr()
    assert out.startswith("enqueued job ")
    assert err.count("\n") == 1, err
    assert "warning: task names not checked" in err, err
    assert "access denied" in err, err
    job = int(out.split()[2])
    assert cli.main(["enqueue", "record", "--unique-key", "cli-once", "--on-duplicate", "keep"]) == 0
    assert capsys.readouterr().out.startswith(f"merged into job {job} (record)")
    # --app checks task names without reading the database.
    assert cli.main(["enqueue", "nope", "--app", "tests.integration.jobs_app"]) == 2
    assert "unknown task 'nope'" in capsys.readouterr().err
    roles.sql.execute("DELETE FROM duecast_jobs WHERE id = %s", (job,))


def test_the_dashboard_account_reads_everything_and_changes_nothing(
    roles: Granted, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    job = dead_job(roles)
    settings = roles.settings("dashboard", web={"token": TOKEN, "refresh_s": 0, "port": 0})
    monkeypatch.setattr("duecast.cli.status.load_settings", lambda config=None: settings)
    assert cli.main(["status"]) == 0, capsys.readouterr().err
    assert apps.RESCAN in capsys.readouterr().out

    ctx = WebContext(settings, History(100), settings.jobs.schedules)
    ctx.history.add(Sampler.connect(settings).read())
    client = create_app(ctx).test_client()
    for path in (
        "/",
        "/workers",
        "/dead",
        "/schedules",
        "/topics",
        f"/sources/{apps.RESCAN}",
        f"/sources/{range_app.SOURCE}",
        f"/jobs/{job}",
        f"/jobs/{job}/retry",
    ):
        resp = client.get(path)
        assert resp.status_code == 200, (path, resp.get_data(as_text=True)[:500])
    for action in ("retry", "discard"):
        resp = client.post(f"/jobs/{job}/{action}", data={"token": TOKEN, "confirm": "yes"})
        assert resp.status_code == 403, resp.get_data(as_text=True)[:500]
        assert f"is read-only: it may not {action} jobs; nothing changed" in resp.get_data(as_text=True)
    roles.sql.execute("SELECT dc_state FROM duecast_jobs WHERE id = %s", (job,))
    assert roles.sql.fetchone() == (int(State.DEAD),)
    for stmt in (
        f"UPDATE duecast_jobs SET dc_state = 0 WHERE id = {job}",
        f"DELETE FROM duecast_jobs WHERE id = {job}",
        "INSERT INTO duecast_jobs (task, payload) VALUES ('x', 'null')",
        "UPDATE user_block_status SET status = 2",
        "DELETE FROM duecast_messages",
        "UPDATE duecast_workers SET tasks = 'x'",
        "CREATE TABLE x (id INT)",
    ):
        roles.refused("dashboard", stmt)
    roles.sql.execute("DELETE FROM duecast_jobs WHERE id = %s", (job,))


def test_the_enqueuers_keep_lookup_can_hold_only_the_row_it_asks_for(roles: Granted) -> None:
    """Issue 25, item 5: the function `on_duplicate="keep"` calls locks the one holder row (as the
    duplicate INSERT does); a worker's writes of every other job go through meanwhile."""
    roles.sql.execute(
        "INSERT INTO duecast_jobs (task, payload, unique_key, unique_slot) VALUES "
        "('record', '1', 'held', 'held'), ('record', '2', NULL, NULL)"
    )
    held = int(roles.sql.lastrowid or 0)
    other = held + 1
    enqueuer = connect(roles.accounts["enqueuer"])
    worker = connect(roles.accounts["worker"])
    try:
        with enqueuer.cursor() as cur:
            cur.execute("SELECT duecast_jobs_holder('record', 'held'), duecast_jobs_holder('record', 'nope')")
            assert cur.fetchone() == (held, None)  # the transaction stays open, its lock held
        with worker.cursor() as cur:
            cur.execute("SET SESSION innodb_lock_wait_timeout = 1")
            cur.execute(
                "UPDATE duecast_jobs SET lease_until = NOW(6), dc_state = %s WHERE id = %s",
                (int(State.RUNNING), other),
            )
            assert cur.rowcount == 1
        worker.commit()
    finally:
        enqueuer.rollback()
        enqueuer.close()
        worker.close()
        roles.sql.execute("DELETE FROM duecast_jobs WHERE id IN (%s, %s)", (held, other))


def test_the_enqueuer_reads_a_jobs_result_through_the_function_only(roles: Granted) -> None:
    """Stored results: the enqueuer account has no SELECT, so Enqueuer.result() goes through
    `<table>_result`, which gives the outcome's columns of one job and never the payload."""
    roles.sql.execute(
        "INSERT INTO duecast_jobs (task, payload, dc_state, dc_attempt, result, finished_at) "
        "VALUES ('record', '\"secret payload\"', %s, 1, '{\"n\":1}', NOW(6))",
        (int(State.DONE),),
    )
    job = int(roles.sql.lastrowid or 0)
    enqueuer = Enqueuer(roles.settings("enqueuer"), None)
    try:
        got = enqueuer.result(job)
        assert got is not None
        assert (got.state, got.value, got.attempts, got.error) == ("done", {"n": 1}, 1, None)
        assert got.finished_at is not None
        assert enqueuer.result(job + 1000) is None
        direct = connect(roles.accounts["enqueuer"])
        try:
            with direct.cursor() as cur, pytest.raises(pymysql.err.OperationalError) as denied:
                cur.execute("SELECT payload FROM duecast_jobs WHERE id = %s", (job,))
            assert denied.value.args[0] in {1142, 1143}
        finally:
            direct.close()
    finally:
        enqueuer.db.close()
        roles.sql.execute("DELETE FROM duecast_jobs WHERE id = %s", (job,))
