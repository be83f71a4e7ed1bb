"""Real InnoDB deadlocks and lock wait timeouts against a worker, forced by a second session.

The rival session writes ballast rows first (InnoDB rolls back the transaction that changed fewer
rows, so the worker is the victim), locks the last row of the worker's batch, waits until the
worker's statement waits for it (information_schema.INNODB_LOCK_WAITS) with the batch's earlier
rows locked, then asks for the first row: a cycle, and InnoDB kills the worker's transaction with
1213. The worker must retry the unit (start) or the finish, and every row ends acked exactly once.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, cast

import pymysql
import pytest

from duecast.shared.acks import Ack, Row
from duecast.shared.api.enqueue import Enqueuer
from duecast.shared.api.handlers import Handler, Registry
from duecast.shared.fanout.client import connect_redis
from duecast.shared.fanout.keys import Keys
from duecast.shared.fanout.queue import ReadyQueue
from duecast.shared.settings import MySQLSettings, RedisSettings, Settings, WorkerSettings
from duecast.shared.states import State
from duecast.shared.storage.admin import migrate
from duecast.shared.storage.db import Database, connect
from duecast.shared.storage.leased.jobs import JobStore
from duecast.shared.storage.source_store import Store
from duecast.worker.worker import Worker
from tests.integration.conftest import Env
from tests.integration.polling import wait_until

pytestmark = pytest.mark.integration

ROWS = 20
BALLAST = 1000  # rows the rival writes first: far more than a batch, so it is never the victim


class Rival:
    """The second session. Every call blocks like the statement it runs."""

    def __init__(self, settings: MySQLSettings, ballast: str) -> None:
        self.conn = connect(settings)
        self.ballast = ballast
        self.table = self.pk = ""  # what lock() locked last

    def write_ballast(self) -> None:
        with self.conn.cursor() as cur:
            cur.execute(f"INSERT INTO `{self.ballast}` (pad) SELECT 'x' FROM seq_1_to_{BALLAST}")

    def lock(self, table: str, pk: str, row_id: int) -> None:
        self.table, self.pk = table, pk
        with self.conn.cursor() as cur:
            cur.execute(f"SELECT `{pk}` FROM `{table}` WHERE `{pk}` = %s FOR UPDATE", (row_id,))

    def close_cycle(self, sql: pymysql.cursors.Cursor, first: int) -> None:
        """Once the worker waits for the row this session locked, holding `first`: ask for `first`.
        InnoDB rolls the worker back (1213), then grants this lock; the rival then lets go."""
        trx = self.trx_id()
        # MariaDB refreshes its INNODB_* tables only when they were not read for 100 ms: poll slower.
        wait_until(
            lambda: waiters_on(sql, trx) > 0, "the worker to wait for the rival's row lock", interval_s=0.2
        )
        self.lock(self.table, self.pk, first)
        self.rollback()

    def trx_id(self) -> int:
        with self.conn.cursor() as cur:
            cur.execute(
                "SELECT trx_id FROM information_schema.INNODB_TRX WHERE trx_mysql_thread_id = CONNECTION_ID()"
            )
            row = cur.fetchone()
        assert row is not None, "the rival has no open transaction"
        return int(row[0])

    def rollback(self) -> None:
        self.conn.rollback()


def waiters_on(sql: pymysql.cursors.Cursor, trx_id: int) -> int:
    """How many transactions wait for a lock `trx_id` holds (MariaDB; MySQL 8 has
    performance_schema.data_lock_waits instead)."""
    sql.execute(
        "SELECT COUNT(*) FROM information_schema.INNODB_LOCK_WAITS WHERE blocking_trx_id = %s", (trx_id,)
    )
    return int(sql.fetchone()[0])


@pytest.fixture
def rival(mysql_settings: MySQLSettings, sql: pymysql.cursors.Cursor) -> Iterator[Rival]:
    ballast = f"ballast_{uuid.uuid4().hex[:8]}"
    sql.execute(f"CREATE TABLE `{ballast}` (id INT AUTO_INCREMENT PRIMARY KEY, pad CHAR(8) NOT NULL)")
    r = Rival(mysql_settings, ballast)
    yield r
    r.conn.close()
    sql.execute(f"DROP TABLE IF EXISTS `{ballast}`")


class InThread:
    """The worker's ticks on their own thread, as --drain runs them; join() re-raises what they raised."""

    def __init__(self, worker: Worker) -> None:
        self.error: list[BaseException] = []
        self.thread = threading.Thread(target=self._run, args=(worker,), daemon=True)
        self.thread.start()

    def _run(self, worker: Worker) -> None:
        try:
            while not worker.tick().idle:
                pass
        except BaseException as exc:
            self.error.append(exc)
        finally:
            worker.close()

    def join(self) -> None:
        self.thread.join(30)
        assert not self.thread.is_alive(), "the worker's tick did not finish"
        if self.error:
            raise self.error[0]


def retries(caplog: pytest.LogCaptureFixture, text: str, code: int) -> list[logging.LogRecord]:
    return [r for r in caplog.records if text in r.getMessage() and f"({code}," in r.getMessage()]


# -- a re-scan source in row mode -----------------------------------------------------------------


def test_a_real_deadlock_while_a_rescan_batch_starts_retries_the_unit(
    make_env: Callable[..., Env], rival: Rival, sql: pymysql.cursors.Cursor, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    env = make_env("rescan", rows=ROWS)
    env.queue.push(env.source.name, env.store.claim_due(100))
    runs: Counter[int] = Counter()

    def handle(row: Row) -> Ack:
        runs[int(row[env.id_column])] += 1
        return Ack.touch(status=7)

    worker = Worker(
        {env.source.name: cast(Store, env.store)},
        {env.source.name: Handler(env.source.name, handle, batch=False)},
        env.queue,
        WorkerSettings(block_timeout_s=0.1),
    )
    rival.write_ballast()
    rival.lock(env.table, env.id_column, ROWS)  # the batch's last row
    ticking = InThread(worker)  # started() locks rows 1..19 in id order, then waits for row 20
    rival.close_cycle(sql, 1)
    ticking.join()

    assert retries(caplog, "retrying the start", 1213), "the worker was not the deadlock victim"
    assert runs == Counter(dict.fromkeys(range(1, ROWS + 1), 1))  # each handled once, after the retry
    assert env.states() == dict.fromkeys(range(1, ROWS + 1), (0, 1))  # acked under attempt 1
    assert env.count("status = 7") == ROWS
    assert (worker.counts["acked"], worker.counts["stale_acks"]) == (ROWS, 0)


# -- a jobs queue -------------------------------------------------------------------------------------

handlers = Registry()


@dataclass
class Gate:
    """The `gated` task waits here until the test has its locks in place."""

    arrived: threading.Event
    open: threading.Event
    runs: Counter[int]


GATE = Gate(threading.Event(), threading.Event(), Counter())


@handlers.task("gated")
def gated(payload: Any) -> None:
    GATE.runs[int(payload)] += 1
    GATE.arrived.set()
    assert GATE.open.wait(30), "the test never opened the gate"


@dataclass
class JobsRun:
    settings: Settings
    store: JobStore
    worker: Worker
    ids: list[int]
    runs: list[int]  # the runs they were claimed in, in id order (more than one: see run_size)

    def states(self) -> dict[int, tuple[int, int]]:
        with self.store.db.transaction() as cur:
            cur.execute(f"SELECT id, dc_state, dc_attempt FROM `{self.settings.jobs.table}`")
            return {int(i): (int(s), int(a)) for i, s, a in cur.fetchall()}


@pytest.fixture
def jobs_run(
    mysql_settings: MySQLSettings, redis_settings: RedisSettings, sql: pymysql.cursors.Cursor
) -> Iterator[Callable[..., JobsRun]]:
    """jobs_run(**mysql) -> ROWS claimed `gated` jobs pushed to Redis, and a worker for them."""
    made: list[JobsRun] = []

    def make(**mysql: Any) -> JobsRun:
        GATE.arrived.clear()
        GATE.open.clear()
        GATE.runs.clear()
        table = f"jobs_{uuid.uuid4().hex[:8]}"
        settings = Settings(
            mysql=mysql_settings.model_copy(update=mysql),
            redis=redis_settings,
            # A long lease: the keeper does not renew (or fence) while the test holds rows locked.
            # Two runs, so a start locks two run rows, in order: a rival can close a cycle with it.
            jobs={  # type: ignore[arg-type]
                "table": table,
                "schedules_table": f"{table}_s",
                "lease_s": 60,
                "retention_s": 3600,
                "run_size": ROWS // 2,
            },
        )
        migrate.apply(settings)
        enqueuer = Enqueuer(settings, None)
        ids = [enqueuer.enqueue("gated", n) for n in range(ROWS)]
        enqueuer.db.close()
        src = settings.source("jobs.default")
        store = JobStore(Database(settings.mysql), src, settings.jobs, settings.mysql)
        queue = ReadyQueue(connect_redis(redis_settings), Keys(redis_settings.key_prefix))
        entries = store.claim_due(100)
        queue.push(src.name, entries)
        worker = Worker(
            {src.name: cast(Store, store)},
            {src.name: handlers.handler("jobs")},
            queue,
            WorkerSettings(block_timeout_s=0.1),
        )
        made.append(JobsRun(settings, store, worker, sorted(ids), sorted(e.id for e in entries)))
        return made[-1]

    yield make
    GATE.open.set()
    for run in made:
        run.store.db.close()
        sql.execute(f"DROP TABLE IF EXISTS `{run.settings.jobs.table}`, `{run.settings.jobs.table}_s`")


def assert_all_done_once(run: JobsRun) -> None:
    assert GATE.runs == Counter(dict.fromkeys(range(ROWS), 1))  # every task ran once
    assert run.states() == {i: (State.DONE, 1) for i in run.ids}  # finished under its first attempt
    assert (run.worker.counts["acked"], run.worker.counts["stale_acks"]) == (ROWS, 0)


def test_a_real_deadlock_while_jobs_start_retries_the_unit(
    jobs_run: Callable[..., JobsRun],
    rival: Rival,
    sql: pymysql.cursors.Cursor,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING)
    run = jobs_run()
    GATE.open.set()  # the tasks run straight through: the deadlock is at the start
    rival.write_ballast()
    runs = run.settings.jobs.runs_table  # a start locks its runs' rows, in id order
    rival.lock(runs, "id", run.runs[-1])
    ticking = InThread(run.worker)
    rival.close_cycle(sql, run.runs[0])
    ticking.join()

    assert retries(caplog, "retrying the start", 1213), "the worker was not the deadlock victim"
    assert_all_done_once(run)


def test_a_real_deadlock_while_jobs_finish_retries_the_finish(
    jobs_run: Callable[..., JobsRun],
    rival: Rival,
    sql: pymysql.cursors.Cursor,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING)
    run = jobs_run()
    table = run.settings.jobs.table
    ticking = InThread(run.worker)
    assert GATE.arrived.wait(10), "the batch did not start"  # RUNNING is committed; tasks parked
    rival.write_ballast()
    rival.lock(table, "id", run.ids[-1])
    GATE.open.set()  # the tasks end; the finish locks ids in order and waits for the last one
    rival.close_cycle(sql, run.ids[0])
    ticking.join()

    assert retries(caplog, "finishing jobs hit", 1213), "the finish was not the deadlock victim"
    assert not retries(caplog, "retrying the start", 1213)  # the finish alone ran again, not the tasks
    assert_all_done_once(run)


def test_a_lock_wait_timeout_while_jobs_finish_retries_the_finish(
    jobs_run: Callable[..., JobsRun], rival: Rival, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    run = jobs_run(lock_wait_s=1)
    table = run.settings.jobs.table
    ticking = InThread(run.worker)
    assert GATE.arrived.wait(10), "the batch did not start"
    rival.lock(table, "id", run.ids[len(run.ids) // 2])  # held past the worker's lock wait
    GATE.open.set()
    wait_until(lambda: retries(caplog, "finishing jobs hit", 1205), "the finish to time out on the lock")
    rival.rollback()  # the retry (waiting, or about to) now gets every row
    ticking.join()

    assert_all_done_once(run)
