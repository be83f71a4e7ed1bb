"""One-off jobs on real MariaDB + Redis, beyond enqueue: retries with backoff, dead letters, explicit
retry and discard, interruptions, leases, retention and pruning, unique keys, queues and priorities,
transactional tasks, and recurring schedules under two dispatchers.

Time passes by back-dating run_at / lease_until / last_run_at in SQL, never by sleeping.
"""

from __future__ import annotations

import itertools
import threading
import uuid
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pymysql
import pytest

from duecast.admin import migrate
from duecast.dispatcher.main import serve as serve_dispatcher
from duecast.dispatcher.pruner import Pruner
from duecast.dispatcher.recurring import Recurring
from duecast.dispatcher.schedule_store import ScheduleStore
from duecast.shared.acks import Ack
from duecast.shared.api.enqueue import DuplicateJob, EnqueueError, Enqueuer, Job
from duecast.shared.fanout.queue import connect_redis
from duecast.shared.settings import MySQLSettings, RedisSettings, ScheduleSettings, Settings
from duecast.shared.states import State
from duecast.shared.storage.db import Database
from duecast.shared.storage.leased.jobs import JobStore
from duecast.worker.main import serve as serve_worker
from tests.integration import jobs_app
from tests.integration.polling import wait_until

pytestmark = pytest.mark.integration
APP = "tests.integration.jobs_app"


class JobsEnv:
    def __init__(self, settings: Settings, sql: pymysql.cursors.Cursor) -> None:
        self.settings = settings
        self.sql = sql
        self.table = settings.jobs.table
        self.enqueuer = Enqueuer(settings, connect_redis(settings.redis), jobs_app.handlers.task_names)

    def with_jobs(self, **jobs: Any) -> JobsEnv:
        return JobsEnv(
            self.settings.model_copy(update={"jobs": self.settings.jobs.model_copy(update=jobs)}), self.sql
        )

    def run_once(self) -> None:
        """One dispatch and one worker drain: every due job runs (at most) once."""
        serve_dispatcher(self.settings, threading.Event(), drain=True)
        serve_worker(self.settings, threading.Event(), drain=True)

    def make_due(self) -> None:
        """Time passes: every pending job is due now."""
        self.sql.execute(f"UPDATE `{self.table}` SET run_at = NOW(6) WHERE dc_state = {int(State.IDLE)}")

    def job(self, job_id: int, *columns: str) -> tuple[Any, ...]:
        self.sql.execute(f"SELECT {', '.join(columns)} FROM `{self.table}` WHERE id = %s", (job_id,))
        row = self.sql.fetchone()
        assert row is not None, f"job {job_id} is gone"
        return tuple(row)

    def exists(self, job_id: int) -> bool:
        self.sql.execute(f"SELECT COUNT(*) FROM `{self.table}` WHERE id = %s", (job_id,))
        return bool(self.sql.fetchone()[0])

    def store(self, queue: str = "default") -> JobStore:
        src = self.settings.source(f"jobs.{queue}")
        return JobStore(Database(self.settings.mysql), src, self.settings.jobs, self.settings.mysql)


@pytest.fixture
def env(
    mysql_settings: MySQLSettings, redis_settings: RedisSettings, sql: pymysql.cursors.Cursor
) -> Iterator[JobsEnv]:
    table = f"jobs_{uuid.uuid4().hex[:8]}"
    settings = Settings(
        mysql=mysql_settings,
        redis=redis_settings,
        jobs={  # type: ignore[arg-type]
            "table": table,
            "schedules_table": f"{table}_s",
            "queues": ["critical", "default"],
            "max_attempts": 5,
            "retry_base_s": 10,
        },
        worker={"app": APP, "block_timeout_s": 0.1, "error_backoff_s": 0.05},  # type: ignore[arg-type]
        dispatcher={"poll_interval_s": 0.05},  # type: ignore[arg-type]
    )
    migrate.apply(settings)
    jobs_app.RUNS.clear()
    yield JobsEnv(settings, sql)
    sql.execute(f"DROP TABLE IF EXISTS `{table}`, `{table}_s`")


def payloads() -> list[Any]:
    return [p for p, _ in jobs_app.RUNS]


# ---------------------------------------------------------------- failures, retries, dead letters


def test_a_job_that_always_raises_is_dead_after_exactly_max_attempts_with_its_error(env: JobsEnv) -> None:
    job_id = env.enqueuer.enqueue("fail_always", "x", max_attempts=3)

    env.run_once()
    state, errors, delay_s = env.job(
        job_id, "dc_state", "errors", "TIMESTAMPDIFF(MICROSECOND, NOW(6), run_at)"
    )
    # Pending again after the first backoff step: between half of retry_base_s and all of it.
    assert (state, errors) == (State.IDLE, 1)
    assert 4.5e6 <= delay_s <= 10e6
    env.run_once()
    assert payloads() == ["x"]  # not due yet: the backoff holds

    for _ in range(5):
        env.make_due()
        env.run_once()

    assert payloads() == ["x"] * 3
    state, errors, attempt, error, finished = env.job(
        job_id, "dc_state", "errors", "dc_attempt", "last_error", "finished_at IS NOT NULL"
    )
    assert (state, errors, attempt, finished) == (State.DEAD, 3, 3, 1)
    assert "RuntimeError: boom x" in error
    assert "Traceback (most recent call last)" in error


def test_backoff_grows_exponentially_between_failures(env: JobsEnv) -> None:
    job_id = env.enqueuer.enqueue("fail_always", "x")
    delays = []
    for _ in range(4):
        env.make_due()
        env.run_once()
        (delay,) = env.job(job_id, "TIMESTAMPDIFF(MICROSECOND, NOW(6), run_at) / 1e6")
        delays.append(float(delay))
    # retry_base_s = 10, equal jitter: failure n waits between 10 * 2^(n-1) / 2 and 10 * 2^(n-1).
    for n, d in enumerate(delays, start=1):
        step = 10 * 2 ** (n - 1)
        assert step / 2 - 1 <= d <= step, (n, delays)


def test_a_task_can_ask_for_a_retry_later_without_using_an_attempt(env: JobsEnv) -> None:
    job_id = env.enqueuer.enqueue("snooze_once", "s")
    env.run_once()
    state, errors, wait = env.job(job_id, "dc_state", "errors", "TIMESTAMPDIFF(SECOND, NOW(6), run_at)")
    assert (state, errors) == (State.IDLE, 0)
    assert 3590 <= wait <= 3600
    env.make_due()
    env.run_once()
    assert payloads() == ["s", "s"]
    assert not env.exists(job_id)


def test_a_retry_at_a_given_time_is_stored_in_the_databases_zone(env: JobsEnv) -> None:
    store = env.store()
    job_id = env.enqueuer.enqueue("record", "r")
    (entry,) = store.claim_due(10)
    at = datetime.now(UTC) + timedelta(hours=2)
    with store.started([entry]) as batch:
        assert batch.ack([(batch.rows[0], Ack.retry(at=at))]).acked == 1
    (diff,) = env.job(
        job_id, "TIMESTAMPDIFF(SECOND, UTC_TIMESTAMP(6), CONVERT_TZ(run_at, @@session.time_zone, '+00:00'))"
    )
    assert abs(diff - 7200) <= 60
    with pytest.raises(ValueError, match="timezone-aware"):
        Ack.retry(at=datetime.now())


def test_a_task_can_discard_its_job_which_is_kept_dead_with_the_reason(env: JobsEnv) -> None:
    job_id = env.enqueuer.enqueue("give_up", "g")
    env.run_once()
    state, errors, error = env.job(job_id, "dc_state", "errors", "last_error")
    assert (state, errors) == (State.DEAD, 0)
    assert error == "discarded by its task: nothing to do for g"


def test_an_interrupted_job_runs_again_and_is_dead_after_max_interruptions(env: JobsEnv) -> None:
    env = env.with_jobs(max_interruptions=2)
    store = env.store()
    job_id = env.enqueuer.enqueue("record", "i")
    for n in (1, 2):
        (entry,) = store.claim_due(10)
        with store.started([entry]):
            pass  # the worker "died" here: RUNNING was committed, nothing finished it
        assert env.job(job_id, "dc_state", "worker IS NOT NULL") == (State.RUNNING, 1)
        assert store.requeue_expired(60, 100) == 0  # the lease still holds: not interrupted
        env.sql.execute(f"UPDATE `{env.table}` SET lease_until = NOW(6) - INTERVAL 1 SECOND")
        assert store.requeue_expired(60, 100) == 1
        state, interruptions, errors = env.job(job_id, "dc_state", "interruptions", "errors")
        assert (interruptions, errors) == (n, 0)
        assert state == (State.IDLE if n == 1 else State.DEAD)
    assert "interrupted 2 times" in env.job(job_id, "last_error")[0]
    assert store.claim_due(10) == []


def test_a_running_jobs_lease_is_extended_while_its_handler_runs(env: JobsEnv) -> None:
    env = env.with_jobs(lease_s=3)
    store = env.store()
    job_id = env.enqueuer.enqueue("record", "long")
    (entry,) = store.claim_due(10)
    with store.started([entry]):
        (first,) = env.job(job_id, "lease_until")

        def extended() -> bool:
            return bool(env.job(job_id, "lease_until")[0] > first)

        wait_until(extended, "the lease keeper to extend the lease", timeout_s=5)
        assert store.requeue_expired(60, 100) == 0


def test_a_late_ack_of_an_interrupted_run_is_stale(env: JobsEnv) -> None:
    store = env.store()
    job_id = env.enqueuer.enqueue("record", "late")
    (entry,) = store.claim_due(10)
    with store.started([entry]) as batch:
        env.sql.execute(f"UPDATE `{env.table}` SET lease_until = NOW(6) - INTERVAL 1 SECOND")
        assert store.requeue_expired(60, 100) == 1
        counts = batch.ack([(batch.rows[0], Ack.default())])
    assert (counts.acked, counts.stale) == (0, 1)
    assert env.job(job_id, "dc_state", "interruptions") == (State.IDLE, 1)


# ---------------------------------------------------------------- transactional tasks


@pytest.fixture
def accounts(env: JobsEnv) -> Iterator[str]:
    table = f"acct_{uuid.uuid4().hex[:8]}"
    env.sql.execute(f"CREATE TABLE `{table}` (id INT AUTO_INCREMENT PRIMARY KEY, account INT, amount INT)")
    yield table
    env.sql.execute(f"DROP TABLE IF EXISTS `{table}`")


def test_a_transactional_tasks_writes_commit_with_its_ack_or_not_at_all(env: JobsEnv, accounts: str) -> None:
    ok = env.enqueuer.enqueue("credit", {"table": accounts, "account": 1, "amount": 10})
    bad = env.enqueuer.enqueue("credit", {"table": accounts, "account": 2, "amount": 20, "then_fail": True})
    env.run_once()
    env.sql.execute(f"SELECT account, amount FROM `{accounts}`")
    assert env.sql.fetchall() == ((1, 10),)  # the failed run's insert was rolled back with it
    assert not env.exists(ok)
    state, errors, error = env.job(bad, "dc_state", "errors", "last_error")
    assert (state, errors) == (State.IDLE, 1)
    assert "failed after writing" in error


def test_a_transactional_tasks_writes_are_undone_when_its_ack_is_stale(env: JobsEnv, accounts: str) -> None:
    store = env.store()
    env.enqueuer.enqueue("credit", {"table": accounts, "account": 3, "amount": 30})
    (entry,) = store.claim_due(10)
    with store.started([entry]) as batch:
        env.sql.execute(f"UPDATE `{env.table}` SET lease_until = NOW(6) - INTERVAL 1 SECOND")
        store.requeue_expired(60, 100)  # another run owns the job now
        (outcome,) = jobs_app.handlers.handler("jobs").run(batch.rows)
        assert isinstance(outcome, Ack)
        counts = batch.ack([(batch.rows[0], outcome)])
    assert (counts.acked, counts.stale) == (0, 1)
    env.sql.execute(f"SELECT COUNT(*) FROM `{accounts}`")
    assert env.sql.fetchone()[0] == 0


# ---------------------------------------------------------------- retention and pruning


def test_done_jobs_are_kept_for_the_retention_then_pruned(env: JobsEnv) -> None:
    env = env.with_jobs(retention_s=3600, dead_retention_s=7200)
    done = env.enqueuer.enqueue("record", "d", unique_key="k1")
    dead = env.enqueuer.enqueue("give_up", "x")
    env.run_once()
    assert env.job(done, "dc_state", "unique_slot", "finished_at IS NOT NULL") == (State.DONE, None, 1)
    # Its unique key is free again once it is done.
    assert env.enqueuer.enqueue("record", "d2", unique_key="k1") > done
    pruner = Pruner(env.store(), batch=1, interval_s=60)
    pruner.prune_all()
    assert env.exists(done)
    assert env.exists(dead)
    env.sql.execute(
        f"UPDATE `{env.table}` SET run_at = NOW(6) - INTERVAL 3601 SECOND WHERE id IN (%s, %s)", (done, dead)
    )
    pruner.prune_all()
    assert not env.exists(done)
    assert env.exists(dead)  # dead jobs have their own, longer retention
    env.sql.execute(f"UPDATE `{env.table}` SET run_at = NOW(6) - INTERVAL 7201 SECOND WHERE id = %s", (dead,))
    pruner.prune_all()
    assert not env.exists(dead)
    assert pruner.pruned == 2


# ---------------------------------------------------------------- unique jobs


def test_concurrent_enqueues_with_one_unique_key_yield_one_job(env: JobsEnv) -> None:
    results: list[object] = []
    barrier = threading.Barrier(8)

    def enqueue() -> None:
        enqueuer = Enqueuer(env.settings, None, None)
        barrier.wait()
        try:
            results.append(enqueuer.enqueue("record", "u", unique_key="report:42"))
        except DuplicateJob as exc:
            results.append(exc)

    threads = [threading.Thread(target=enqueue) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    ids = [r for r in results if isinstance(r, int)]
    assert len(ids) == 1
    assert sum(isinstance(r, DuplicateJob) for r in results) == 7
    env.sql.execute(f"SELECT COUNT(*) FROM `{env.table}`")
    assert env.sql.fetchone()[0] == 1


def test_a_duplicate_can_be_merged_into_the_active_job(env: JobsEnv) -> None:
    first = env.enqueuer.enqueue("record", "a", unique_key="k")
    assert env.enqueuer.enqueue("record", "b", unique_key="k", on_duplicate="keep") == first
    jobs = [Job("record", i, unique_key=f"k{i % 3}") for i in range(10)]
    ids = env.enqueuer.enqueue_many(jobs, on_duplicate="keep")
    env.sql.execute(f"SELECT unique_key, id FROM `{env.table}`")
    by_key = dict(env.sql.fetchall())
    assert len(by_key) == 4  # k, k0, k1, k2
    assert ids == [by_key[f"k{i % 3}"] for i in range(10)]  # a kept duplicate: the existing job's id
    env.run_once()
    assert sorted(map(str, payloads())) == ["0", "1", "2", "a"]


def test_a_unique_key_is_held_per_task_and_a_merge_says_so(env: JobsEnv) -> None:
    first = env.enqueuer.enqueue("record", "a", unique_key="k")
    assert first.merged is False
    other = env.enqueuer.enqueue("fail_always", "b", unique_key="k", queue="default")
    assert other != first
    assert other.merged is False
    kept = env.enqueuer.enqueue("record", "c", unique_key="k", on_duplicate="keep")
    assert (kept, kept.merged) == (first, True)
    # One batch may use one key for several tasks, and two jobs of one task may not.
    ids = env.enqueuer.enqueue_many([Job("record", 1, unique_key="b"), Job("give_up", 2, unique_key="b")])
    assert len(set(ids)) == 2
    with pytest.raises(DuplicateJob, match="'b' of task 'record' appears twice"):
        env.enqueuer.enqueue_many([Job("record", 3, unique_key="b"), Job("record", 4, unique_key="b")])
    env.sql.execute(f"SELECT task, payload FROM `{env.table}` ORDER BY id")
    assert env.sql.fetchall() == (
        ("record", '"a"'),
        ("fail_always", '"b"'),
        ("record", "1"),
        ("give_up", "2"),
    )


def test_a_duplicate_inside_enqueue_many_or_against_an_active_job_writes_nothing(env: JobsEnv) -> None:
    env.enqueuer.enqueue("record", "a", unique_key="taken")
    with pytest.raises(DuplicateJob, match="twice in one enqueue_many"):
        env.enqueuer.enqueue_many([Job("record", 1, unique_key="x"), Job("record", 2, unique_key="x")])
    with pytest.raises(DuplicateJob, match="already holds"):
        env.enqueuer.enqueue_many(
            [Job("record", i) for i in range(600)] + [Job("record", 0, unique_key="taken")]
        )
    env.sql.execute(f"SELECT COUNT(*) FROM `{env.table}`")
    assert env.sql.fetchone()[0] == 1


def test_a_unique_key_is_held_while_the_job_runs_and_retries(env: JobsEnv) -> None:
    job_id = env.enqueuer.enqueue("fail_always", "f", unique_key="k", max_attempts=2)
    env.run_once()  # failed once: pending again, still holding the key
    with pytest.raises(DuplicateJob):
        env.enqueuer.enqueue("fail_always", "r", unique_key="k")
    env.make_due()
    env.run_once()  # dead: the key is free
    assert env.job(job_id, "dc_state") == (State.DEAD,)
    assert env.enqueuer.enqueue("fail_always", "r", unique_key="k") != job_id


# ---------------------------------------------------------------- queues, priorities, times


def test_queues_are_served_in_order_and_priorities_within_a_queue(env: JobsEnv) -> None:
    env.enqueuer.enqueue_many(
        [Job("record", f"default-p5-{i}", priority=5) for i in range(2)]
        + [Job("record", f"default-p0-{i}") for i in range(2)]
        + [Job("record", f"critical-{i}", queue="critical", priority=9) for i in range(2)]
    )
    settings = env.settings.model_copy(
        update={
            "worker": env.settings.worker.model_copy(
                update={"pop_batch": 1, "queues": ["critical", "default"]}
            )
        }
    )
    serve_dispatcher(settings, threading.Event(), drain=True)
    serve_worker(settings, threading.Event(), drain=True)
    assert payloads() == [
        "critical-0",
        "critical-1",
        "default-p0-0",
        "default-p0-1",
        "default-p5-0",
        "default-p5-1",
    ]


def test_a_worker_serves_only_its_queues(env: JobsEnv) -> None:
    env.enqueuer.enqueue("record", "c", queue="critical")
    env.enqueuer.enqueue("record", "d")
    settings = env.settings.model_copy(
        update={"worker": env.settings.worker.model_copy(update={"queues": ["critical"]})}
    )
    serve_dispatcher(settings, threading.Event(), drain=True)
    serve_worker(settings, threading.Event(), drain=True)
    assert payloads() == ["c"]


def test_delayed_and_timed_jobs_wait_for_their_time(env: JobsEnv) -> None:
    later = env.enqueuer.enqueue("record", "later", delay_s=3600)
    at = env.enqueuer.enqueue("record", "at", run_at=datetime.now(UTC) + timedelta(hours=1))
    (diff,) = env.job(at, "TIMESTAMPDIFF(SECOND, NOW(6), run_at)")
    assert 3540 <= diff <= 3600
    env.run_once()
    assert payloads() == []
    detail = env.store().status().detail
    assert detail is not None
    assert (detail["pending"], detail["due"], detail["scheduled"]) == (2, 0, 2)
    env.make_due()
    env.run_once()
    assert sorted(payloads()) == ["at", "later"]
    assert not env.exists(later)


def test_unknown_queues_and_bad_options_are_refused_at_enqueue(env: JobsEnv) -> None:
    for job, message in [
        (Job("record", queue="nope"), "unknown queue 'nope'"),
        (Job("record", priority=10), "priority must be an int 0-9"),
        (Job("record", max_attempts=0), "max_attempts"),
        (Job("record", unique_key=""), "unique_key"),
        (Job("record", run_at=datetime.now()), "timezone-aware"),
    ]:
        with pytest.raises(EnqueueError, match=message):
            env.enqueuer.enqueue_many([job])
    env.sql.execute(f"SELECT COUNT(*) FROM `{env.table}`")
    assert env.sql.fetchone()[0] == 0


def test_status_counts_each_queue_by_state(env: JobsEnv) -> None:
    env.enqueuer.enqueue_many([Job("record", i) for i in range(3)] + [Job("give_up", 0)])
    env.enqueuer.enqueue("record", "later", delay_s=600)
    env.enqueuer.enqueue("record", "c", queue="critical")
    store = env.store()
    store.claim_due(1)
    status = store.status()
    assert status.detail == {
        "pending": 4,
        "due": 3,
        "scheduled": 1,
        "dispatched": 1,
        "running": 0,
        "done": 0,
        "dead": 0,
    }
    assert status.in_flight == 1
    assert status.oldest_due_age_s is not None
    assert status.oldest_due_age_s >= 0


# ---------------------------------------------------------------- recurring schedules


def _recurring(env: JobsEnv, schedule: ScheduleSettings) -> Recurring:
    store = ScheduleStore(Database(env.settings.mysql), env.settings.jobs, Enqueuer(env.settings, None, None))
    return Recurring(store, [schedule])


def test_a_recurring_task_under_two_dispatchers_yields_one_job_per_scheduled_time(env: JobsEnv) -> None:
    sched = ScheduleSettings(name="tick", task="record", every_s=1, payload="tick")
    settings = env.settings.model_copy(
        update={"jobs": env.settings.jobs.model_copy(update={"schedules": [sched]})}
    )
    stop = threading.Event()
    dispatchers = [threading.Thread(target=serve_dispatcher, args=(settings, stop)) for _ in range(2)]
    for t in dispatchers:
        t.start()
    try:

        def runs() -> int:
            env.sql.execute(f"SELECT COUNT(*) FROM `{env.table}` WHERE `schedule` = 'tick'")
            return int(env.sql.fetchone()[0])

        wait_until(lambda: runs() >= 4, "four runs of the schedule", timeout_s=15)
    finally:
        stop.set()
        for t in dispatchers:
            t.join(timeout=15)
    env.sql.execute(
        f"SELECT scheduled_for FROM `{env.table}` WHERE `schedule` = 'tick' ORDER BY scheduled_for"
    )
    times = [r[0] for r in env.sql.fetchall()]
    assert Counter(times).most_common(1)[0][1] == 1  # no fire time twice
    assert all(b - a == timedelta(seconds=1) for a, b in itertools.pairwise(times))  # none skipped
    assert all(t.microsecond == 0 for t in times)  # epoch-aligned seconds


@pytest.mark.parametrize(("missed", "expected"), [("coalesce", 1), ("all", 5), ("skip", 0)])
def test_missed_runs_after_downtime_follow_the_schedules_policy(
    env: JobsEnv, missed: str, expected: int
) -> None:
    # Fires once a minute, 30 s of the minute away from now: the latest fire time is never "on time".
    env.sql.execute("SELECT SECOND(UTC_TIMESTAMP())")
    second = (int(env.sql.fetchone()[0]) + 30) % 60
    sched = ScheduleSettings(name=f"m-{missed}", task="record", cron=f"{second} * * * * *", missed=missed)  # type: ignore[arg-type]
    env = env.with_jobs(schedule_backfill_max=5)
    recurring = _recurring(env, sched)
    recurring.tick()  # first sight: starts now, no backfill
    assert recurring.enqueued == 0
    # Ten minutes of downtime.
    env.sql.execute(
        f"UPDATE `{env.table}_s` SET last_run_at = UTC_TIMESTAMP(6) - INTERVAL 10 MINUTE WHERE name = %s",
        (sched.name,),
    )
    recurring.tick()
    recurring.tick()  # a second tick finds nothing more
    assert recurring.enqueued == expected
    env.sql.execute(f"SELECT COUNT(*) FROM `{env.table}` WHERE `schedule` = %s", (sched.name,))
    assert env.sql.fetchone()[0] == expected
    env.sql.execute(
        f"SELECT TIMESTAMPDIFF(SECOND, last_run_at, UTC_TIMESTAMP(6)) FROM `{env.table}_s` WHERE name = %s",
        (sched.name,),
    )
    assert env.sql.fetchone()[0] < 60  # caught up to the latest minute, whatever was run


def test_a_schedule_naming_an_unknown_task_or_queue_is_refused_at_start(env: JobsEnv) -> None:
    store = ScheduleStore(Database(env.settings.mysql), env.settings.jobs, env.enqueuer)
    with pytest.raises(ValueError, match="no task 'nope'"):
        Recurring(store, [ScheduleSettings(name="x", task="nope", every_s=5)])
    with pytest.raises(ValueError, match=r"queue 'bulk' is not in jobs\.queues"):
        Recurring(store, [ScheduleSettings(name="x", task="record", every_s=5, queue="bulk")])
    with pytest.raises(ValueError, match="cron"):
        Recurring(store, [ScheduleSettings(name="x", task="record", cron="61 * * * *")])


@pytest.mark.parametrize("how", ["consecutive", "one_by_one"])
@pytest.mark.parametrize("on_duplicate", ["error", "keep"])
def test_enqueue_many_returns_each_jobs_id_in_order(env: JobsEnv, how: str, on_duplicate: str) -> None:
    env.enqueuer._ids_how = how  # each way a server's lock mode allows (MariaDB's allows both)
    first = env.enqueuer.enqueue_many([Job("record", i) for i in range(3)], on_duplicate=on_duplicate)  # type: ignore[arg-type]
    ids = env.enqueuer.enqueue_many([Job("record", i) for i in range(3, 1203)], on_duplicate=on_duplicate)  # type: ignore[arg-type]

    env.sql.execute(f"SELECT id, payload FROM `{env.table}`")
    assert dict(env.sql.fetchall()) == {job_id: str(i) for i, job_id in enumerate(first + ids)}
    assert env.enqueuer.enqueue_many([]) == []


def test_a_task_sees_its_own_job(env: JobsEnv) -> None:
    jobs_app.CONTEXTS.clear()
    before = env.job(env.enqueuer.enqueue("record", 0), "created_at")[0]
    once, again = env.enqueuer.enqueue_many([Job("whoami", "once", queue="critical"), Job("whoami", "again")])
    (created,) = env.job(once, "created_at")  # before it runs: a done job is deleted
    env.run_once()
    env.run_once()  # the retry of "again"

    seen = {(c.id, c.attempt): c for c in jobs_app.CONTEXTS}
    assert sorted(seen) == [(once, 1), (again, 1), (again, 2)]
    assert (seen[once, 1].queue, seen[once, 1].task, seen[again, 2].queue) == (
        "critical",
        "whoami",
        "default",
    )
    assert seen[once, 1].enqueued_at == created >= before
    assert (seen[again, 2].errors, seen[again, 2].max_attempts) == (0, 5)  # a retry is not an error
