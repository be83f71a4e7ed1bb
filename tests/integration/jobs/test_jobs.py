"""One-off jobs on real MariaDB + Redis: validated enqueue, all-or-nothing batches, the caller's
transaction (outbox), and the wake-up that starts a job without waiting for a poll."""

from __future__ import annotations

import json
import logging
import math
import threading
import uuid
from collections.abc import Iterator

import pymysql
import pytest

from duecast.dispatcher.main import serve as serve_dispatcher
from duecast.shared.acks import Ack
from duecast.shared.api.enqueue import EnqueueError, Enqueuer, Job
from duecast.shared.fanout.client import connect_redis
from duecast.shared.process.runtime import build_stores
from duecast.shared.settings import MySQLSettings, RedisSettings, Settings
from duecast.shared.storage.admin import migrate
from duecast.shared.storage.db import connect
from duecast.shared.storage.leased.jobs import JobStore
from duecast.worker.main import serve as serve_worker
from tests.integration import jobs_app
from tests.integration.polling import wait_until

pytestmark = pytest.mark.integration


@pytest.fixture
def settings(
    mysql_settings: MySQLSettings, redis_settings: RedisSettings, sql: pymysql.cursors.Cursor
) -> Iterator[Settings]:
    table = f"jobs_{uuid.uuid4().hex[:8]}"
    s = Settings(
        mysql=mysql_settings,
        redis=redis_settings,
        jobs={"table": table, "schedules_table": f"{table}_s", "max_payload_bytes": 1024},  # type: ignore[arg-type]
        worker={"app": "tests.integration.jobs_app"},  # type: ignore[arg-type]
        dispatcher={"poll_interval_s": 2.0},  # type: ignore[arg-type]
    )
    migrate.apply(s)
    jobs_app.RUNS.clear()
    yield s
    sql.execute(f"DROP TABLE IF EXISTS `{table}`, `{table}_s`, `{table}_runs`, `{table}_cursors`")


@pytest.fixture
def enqueuer(settings: Settings) -> Enqueuer:
    return Enqueuer(settings, connect_redis(settings.redis), tasks=jobs_app.handlers.task_names)


def count(sql: pymysql.cursors.Cursor, settings: Settings) -> int:
    sql.execute(f"SELECT COUNT(*) FROM `{settings.jobs.table}`")
    return int(sql.fetchone()[0])


def test_enqueue_many_writes_10000_jobs_in_one_transaction(
    enqueuer: Enqueuer, settings: Settings, sql: pymysql.cursors.Cursor
) -> None:
    ids = enqueuer.enqueue_many(Job("record", {"n": i}) for i in range(10_000))
    assert count(sql, settings) == 10_000
    sql.execute(f"SELECT id, payload FROM `{settings.jobs.table}`")
    assert dict(sql.fetchall()) == {job_id: f'{{"n":{i}}}' for i, job_id in enumerate(ids)}
    sql.execute(f"SELECT payload FROM `{settings.jobs.table}` ORDER BY id LIMIT 1")
    assert sql.fetchone()[0] == '{"n":0}'


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        (Job("record", {"x": math.nan}), "not JSON-serialisable"),
        (Job("record", {"x": math.inf}), "not JSON-serialisable"),
        (Job("record", {"x": object()}), "not JSON-serialisable"),
        (Job("record", "x" * 2000), "limit is 1024"),
        (Job("no-such-task", {}), "unknown task"),
        (Job("record", "\ud800"), "lone surrogate"),
        (Job("record", {}, delay_s=-1), "delay_s"),
        # Each reached MySQL (or the driver) before issue 17 and failed there with a traceback.
        (Job("record", {}, delay_s=1e300), "delay_s must be 0-"),  # OperationalError 1916
        (Job("record", {}, delay_s=1e12), "delay_s must be 0-"),  # DataError 1441
        (Job("record", {}, delay_s="5"), "delay_s must be a number"),  # type: ignore[arg-type]
        (Job("record", {}, unique_key="\ud800"), "unique_key .* lone surrogate"),  # UnicodeEncodeError
    ],
)
def test_one_bad_job_at_9999_leaves_nothing_written(
    enqueuer: Enqueuer, settings: Settings, sql: pymysql.cursors.Cursor, bad: Job, message: str
) -> None:
    jobs = [Job("record", {"n": i}) for i in range(9_998)] + [bad, Job("record", {"n": 10_000})]
    with pytest.raises(EnqueueError, match=message):
        enqueuer.enqueue_many(jobs)
    assert count(sql, settings) == 0


def test_a_failure_inside_the_batch_rolls_back_every_job(
    enqueuer: Enqueuer, settings: Settings, sql: pymysql.cursors.Cursor
) -> None:
    # A failure on the server side after 9,999 jobs were written in the caller's transaction: the
    # 10,000th write is refused (a duplicate id), and the caller rolls back.
    conn = connect(settings.mysql)
    try:
        enqueuer.enqueue_many([Job("record", i) for i in range(9_999)], conn=conn)
        with conn.cursor() as cur, pytest.raises(pymysql.err.IntegrityError):
            cur.execute(
                f"INSERT INTO `{settings.jobs.table}` (id, task, payload) SELECT MIN(id), 'record', '1' "
                f"FROM `{settings.jobs.table}`"
            )
        conn.rollback()
    finally:
        conn.close()
    assert count(sql, settings) == 0


def test_jobs_in_a_rolled_back_caller_transaction_never_run(
    enqueuer: Enqueuer, settings: Settings, sql: pymysql.cursors.Cursor
) -> None:
    conn = connect(settings.mysql)
    try:
        enqueuer.enqueue("record", {"outbox": 1}, conn=conn)
        conn.rollback()  # the business failed
        enqueuer.enqueue("record", {"outbox": 2}, conn=conn)
        assert count(sql, settings) == 0  # duecast never commits the caller's transaction
        conn.commit()
    finally:
        conn.close()
    serve_dispatcher(settings, threading.Event(), drain=True)
    serve_worker(settings, threading.Event(), drain=True)
    assert [p for p, _ in jobs_app.RUNS] == [{"outbox": 2}]
    assert count(sql, settings) == 0


def test_a_wake_up_starts_a_job_long_before_the_next_poll(enqueuer: Enqueuer, settings: Settings) -> None:
    stop = threading.Event()
    threads = [
        threading.Thread(target=serve_dispatcher, args=(settings, stop), daemon=True),
        threading.Thread(target=serve_worker, args=(settings, stop), daemon=True),
    ]
    for t in threads:
        t.start()
    try:
        enqueuer.enqueue("record", "warm-up")  # the first tick may be mid-poll; measure the next
        wait_until(lambda: len(jobs_app.RUNS) == 1, "warm-up job")
        jobs_app.RUNS.clear()
        sql_now = connect(settings.mysql)
        with sql_now.cursor() as cur:
            cur.execute("SELECT UNIX_TIMESTAMP(NOW(6))")
            enqueued_at = float(cur.fetchone()[0])
        sql_now.close()
        enqueuer.enqueue("record", "now")
        wait_until(lambda: len(jobs_app.RUNS) == 1, "the job to start")
        started_at = jobs_app.RUNS[0][1]
        # poll_interval_s is 2 s: a start well under it can only come from the wake-up.
        assert started_at - enqueued_at < 1.0
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=10)


ODD_PAYLOADS = [
    {"emoji": "😀👍🏽", "rtl": "שלום مرحبا", "nul": "a\x00b", "quotes": "' \" \\ `", "lines": "1\n2\r\n3\t"},
    "just a string with \\u0000 spelled out",
    [1, -2, 3.5, 1e300, None, True, False, 2**63, -(2**63)],
    {"deep": [[[[[[[[[[{"x": "y"}]]]]]]]]]]},
    "",
    0,
    None,
]


def test_a_worker_hands_tasks_their_payload_exactly_as_enqueued(
    enqueuer: Enqueuer, settings: Settings, sql: pymysql.cursors.Cursor
) -> None:
    """The worker's start reads a batch's jobs as one packed JSON value (shared.storage.packed); every
    payload still reaches its task unchanged."""
    enqueuer.enqueue_many(Job("record", p) for p in ODD_PAYLOADS)
    serve_dispatcher(settings, threading.Event(), drain=True)
    serve_worker(settings, threading.Event(), drain=True)
    got = [p for p, _ in jobs_app.RUNS]
    assert sorted(map(repr, got)) == sorted(map(repr, ODD_PAYLOADS))
    assert count(sql, settings) == 0


def test_a_packed_batch_cut_short_is_read_row_by_row(
    enqueuer: Enqueuer, settings: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    """A batch larger than the session's group_concat_max_len (MariaDB cuts JSON_ARRAYAGG there)
    is read with the plain locking read instead: every job still runs once."""
    enqueuer.enqueue_many(Job("record", {"n": i, "pad": "x" * 100}) for i in range(50))
    (store,) = build_stores(settings, [settings.source("jobs.default")])
    assert isinstance(store, JobStore)
    entries = store.claim_due(100)
    assert len(entries) == 1  # one run of all 50 (consecutive ids, one priority)
    with store.db.transaction() as cur:
        cur.execute("SET SESSION group_concat_max_len = 1024")
    with caplog.at_level(logging.WARNING, logger="duecast.packed"), store.started(entries) as batch:
        assert len({r["id"] for r in batch.rows}) == 50
        assert [json.loads(r["payload"])["n"] for r in batch.rows] == list(range(50))
        batch.ack([(row, Ack.default()) for row in batch.rows])
    assert "packed read of jobs gave 0 of 50 rows" in caplog.text
