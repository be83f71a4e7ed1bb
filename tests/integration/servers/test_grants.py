"""sql/grants.sql on the real MariaDB: each account can do its role's work, and nothing more.

The file is run as shipped, with only the database, the account names and the example range
source's name substituted. Accounts and the database carry a random suffix, and are dropped after;
no other account is touched. The roles run through their production wiring (drain mode).
"""

from __future__ import annotations

import re
import threading
import uuid

import pytest

from duecast.dispatcher import main as dispatcher_main
from duecast.shared.api import pauses
from duecast.shared.api.enqueue import Enqueuer, Job
from duecast.shared.queries.pauses import PAUSES_TABLE
from duecast.shared.storage.admin import migrate
from duecast.shared.storage.db import Database
from duecast.shared.storage.pause_store import PauseStore
from duecast.shared.storage.source_store import SourceStore
from duecast.worker import main as worker_main
from tests.integration import apps, jobs_app, range_app
from tests.integration.servers.grants_env import ROWS, Granted

pytestmark = pytest.mark.integration


def test_the_file_grants_each_account_only_what_it_lists(granted: Granted) -> None:
    granted.sql.execute("SHOW GRANTS FOR %s@'%%'", (granted.accounts["migrate"].user,))
    on_database = [
        set(m.group(1).split(", "))
        for (line,) in granted.sql.fetchall()
        if (m := re.match(rf"GRANT (.+) ON `{granted.database}`\.\* TO", line))
    ]
    assert on_database == [{"CREATE", "ALTER", "INDEX", "REFERENCES"}]
    for role in ("dispatcher", "worker", "enqueuer", "publisher", "dashboard"):
        for line in granted.grants_of(role):
            assert "ALL PRIVILEGES" not in line
            assert " ON *.*" not in line or line.startswith("GRANT USAGE"), line
            assert "`.*" not in line, line  # table-level only, never a whole database
            assert not re.search(r"\b(DROP|ALTER|CREATE|GRANT OPTION|SUPER|FILE|PROCESS)\b", line), line


def test_the_migrations_account_migrates_and_can_do_nothing_else(granted: Granted) -> None:
    assert migrate.plan(granted.settings("migrate")) == []  # the fixture's migrate ran as it
    granted.sql.execute(
        "SELECT COUNT(*) FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = %s "
        "AND TABLE_NAME = 'user_block_status' AND COLUMN_NAME LIKE 'dc\\_%%'",
        (granted.database,),
    )
    assert granted.sql.fetchone() == (3,)
    for stmt in (
        "SELECT * FROM user_block_status",
        "UPDATE user_block_status SET status = 2",
        "DELETE FROM duecast_jobs",
        "DROP TABLE user_block_status",
        "TRUNCATE TABLE account_checks",
    ):
        granted.refused("migrate", stmt)
    assert granted.refused("migrate", f"DROP DATABASE `{granted.database}`") == 1044


def test_the_dispatcher_account_claims_and_is_refused_everything_else(granted: Granted) -> None:
    settings = granted.settings("dispatcher", jobs={"enabled": False})
    store = SourceStore(Database(settings.mysql), settings.sources[0])
    try:
        store.verify()
        claimed = store.claim_due(5)
        assert len(claimed) == 5
        assert store.requeue_expired(3600, 100) == 0
        assert store.status().in_flight == 5
        store.reset_dispatched()
    finally:
        store.db.close()
    for stmt in (
        "DROP TABLE user_block_status",
        "DROP TABLE duecast_jobs",
        "ALTER TABLE user_block_status ADD COLUMN x INT",
        "DELETE FROM user_block_status",
        "INSERT INTO user_block_status (user_id, updated_time) VALUES (999, NOW())",
        "UPDATE account_checks SET status = 2",  # range mode: the business table is read-only
        "SELECT * FROM not_duecasts",
        "CREATE TABLE x (id INT)",
    ):
        granted.refused("dispatcher", stmt)


def test_the_worker_account_cannot_claim_insert_or_change_schema(granted: Granted) -> None:
    for stmt in (
        "DROP TABLE user_block_status",
        "ALTER TABLE duecast_jobs ADD COLUMN x INT",
        "INSERT INTO duecast_jobs (task, payload) VALUES ('x', 'null')",
        "INSERT INTO user_block_status (user_id, updated_time) VALUES (999, NOW())",
        f"INSERT INTO dc_ranges_{range_app.SOURCE} (range_id, lo, hi, checked_at) VALUES (99, 0, 1, NOW())",
        "SELECT * FROM not_duecasts",
        "SELECT * FROM duecast_schedules",
    ):
        granted.refused("worker", stmt)


def test_the_enqueuer_account_can_only_add_jobs(granted: Granted) -> None:
    for line in granted.grants_of("enqueuer"):
        # No SELECT either: it could lock rows (issue 25); it may only call the function.
        assert not re.search(r"\b(SELECT|UPDATE|DELETE|ALL PRIVILEGES)\b", line), line
    enqueuer = Enqueuer(granted.settings("enqueuer"), None)
    try:
        first = enqueuer.enqueue("record", {"n": 1}, unique_key="grants-once")
        again = enqueuer.enqueue("record", {"n": 2}, unique_key="grants-once", on_duplicate="keep")
        assert again == first
        merged, new = enqueuer.enqueue_many(
            [Job("record", 3, unique_key="grants-once"), Job("record", 4)], on_duplicate="keep"
        )
        assert (merged, merged.merged, new.merged) == (first, True, False)
        enqueuer.enqueue("record", 5, concurrency_key="acct-grants")  # its own INSERT's column list
    finally:
        enqueuer.db.close()
    granted.sql.execute(
        "SELECT payload FROM duecast_jobs WHERE unique_key = 'grants-once' OR payload = '4' "
        "OR concurrency_key = 'acct-grants'"
    )
    assert sorted(p for (p,) in granted.sql.fetchall()) == ["4", "5", '{"n":1}']
    assert granted.refused("enqueuer", "SELECT payload FROM duecast_jobs") == 1142
    for stmt in (
        # The probe's lock (issue 25): held, it stalled every enqueue, ack and lease renewal.
        "SELECT id FROM duecast_jobs FOR UPDATE",
        "SELECT id FROM duecast_jobs LOCK IN SHARE MODE",
        "SELECT COUNT(*) FROM duecast_jobs",
        "SELECT name FROM duecast_workers FOR UPDATE",  # nor the registry's heartbeats
        # The probe's hijack (issue 17): rewrite a queued job's task, payload and time.
        f"UPDATE duecast_jobs SET task = 'fail', payload = '{{\"msg\":\"hijacked\"}}', run_at = NOW(6) "
        f"WHERE id = {first}",
        f"UPDATE duecast_jobs SET run_at = NOW(6) + INTERVAL 1 YEAR WHERE id = {first}",
        f"UPDATE duecast_jobs SET id = id + 1000000 WHERE id = {first}",
        f"UPDATE duecast_jobs SET unique_slot = NULL WHERE id = {first}",
        f"INSERT INTO duecast_jobs (id, task, payload) VALUES ({first}, 'x', 'null') "
        "ON DUPLICATE KEY UPDATE task = 'x'",
        f"REPLACE INTO duecast_jobs (id, task, payload) VALUES ({first}, 'x', 'null')",
        # A job born running, dispatched or dead, or posing as a schedule's run.
        "INSERT INTO duecast_jobs (task, payload, dc_state) VALUES ('x', 'null', 2)",
        "INSERT INTO duecast_jobs (task, payload, errors) VALUES ('x', 'null', 99)",
        "INSERT INTO duecast_jobs (task, payload, schedule, scheduled_for) VALUES ('x', 'null', 's', NOW())",
        "UPDATE duecast_jobs SET dc_state = 1",
        "UPDATE duecast_jobs SET errors = 0",
        "DELETE FROM duecast_jobs",
        "SELECT * FROM user_block_status",
        "SELECT * FROM duecast_schedules",
    ):
        granted.refused("enqueuer", stmt)
    granted.sql.execute(
        "SELECT task, payload, run_at > NOW(6) + INTERVAL 1 DAY FROM duecast_jobs WHERE id = %s", (first,)
    )
    assert granted.sql.fetchone() == ("record", '{"n":1}', 0)
    granted.sql.execute("DELETE FROM duecast_jobs WHERE unique_key = 'grants-once' OR payload = '4'")


def test_every_role_does_its_whole_job_under_its_grants(roles: Granted) -> None:
    """Dispatcher (rows, ranges and a job queue) and workers, each as its own account, drained."""
    apps.RECORDER.reset()
    range_app.PLAN.reset()
    roles.sql.execute("UPDATE user_block_status SET dc_state = 0, updated_time = NOW(6) - INTERVAL 1 HOUR")
    dispatcher = roles.settings("dispatcher", dispatcher={"poll_interval_s": 0.05})
    enqueuer = Enqueuer(dispatcher, None)  # the dispatcher's account may insert jobs (schedules)
    payload = {"grants": uuid.uuid4().hex}
    enqueuer.enqueue("record", payload)
    enqueuer.db.close()

    dispatcher_main.serve(dispatcher, threading.Event(), drain=True)
    for app, source in (
        ("tests.integration.apps:handlers", apps.RESCAN),
        ("tests.integration.range_app", range_app.SOURCE),
        ("tests.integration.jobs_app", "jobs"),
    ):
        worker = roles.settings("worker", worker={"app": app, "sources": [source], "block_timeout_s": 0.1})
        counts = worker_main.serve(worker, threading.Event(), drain=True).counts
        assert counts["failed"] == 0, (source, counts)

    assert sorted(apps.RECORDER.executions(apps.RESCAN)) == list(range(1, ROWS + 1))
    assert sorted(range_app.PLAN.runs) == list(range(1, ROWS + 1))
    assert jobs_app.runs_of(payload) == 1
    roles.sql.execute("SELECT COUNT(*) FROM user_block_status WHERE dc_state = 0 AND dc_attempt > 0")
    assert roles.sql.fetchone() == (ROWS,)


def test_the_dispatcher_account_pauses_and_resumes_and_the_worker_and_dashboard_only_read_pauses(
    granted: Granted,
) -> None:
    settings = granted.settings("dispatcher", jobs={"enabled": False})
    name = settings.sources[0].name
    assert pauses.pause(settings, "source", name)
    try:
        for role in ("worker", "dashboard"):
            reader = PauseStore(Database(granted.settings(role, jobs={"enabled": False}).mysql))
            try:
                assert reader.paused_sources() == {name}
            finally:
                reader.close()
            granted.refused(role, f"DELETE FROM {PAUSES_TABLE}")
            granted.refused(role, f"INSERT INTO {PAUSES_TABLE} VALUES ('source', 'x', 'x', NOW(6))")
    finally:
        assert pauses.resume(settings, "source", name)
