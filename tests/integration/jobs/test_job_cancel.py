"""Cancelling jobs on MariaDB and Redis (docs/jobs.md, "Cancel"): a pending or scheduled job at once,
final and kept; a job in a run is never started, or its finish is stale; a cancel racing a finish on
the same row: exactly one wins. And on a live worker: an `async def` task is cancelled within about
jobs.lease_s/3, a plain one sees `current_job().cancelled`, and neither is finished nor retried.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import pymysql
import pytest

from duecast.dispatcher.main import serve as serve_dispatcher
from duecast.dispatcher.pruner import Pruner
from duecast.shared.acks import Ack
from duecast.shared.queries.jobs import render_jobs
from duecast.shared.queries.source import in_list
from duecast.shared.states import State
from duecast.shared.storage.admin.job_admin import Filter, JobAdmin
from duecast.shared.storage.db import Database, connect
from duecast.worker.main import serve as serve_worker
from tests.integration import cancel_app
from tests.integration.jobs.jobs_env import JobsEnv, payloads
from tests.integration.polling import wait_until

pytestmark = pytest.mark.integration
LEASE_S = 3.0  # the worker asks about cancels every LEASE_S / 3


@pytest.fixture
def kept(env: JobsEnv) -> JobsEnv:
    """Done jobs kept, so a finish that won a race can be seen."""
    return env.with_jobs(retention_s=3600)


def test_a_pending_job_is_cancelled_at_once_kept_and_never_run(kept: JobsEnv) -> None:
    a, b = kept.enqueuer.enqueue("record", "a"), kept.enqueuer.enqueue("record", "b")
    assert kept.enqueuer.cancel(a) == 1
    result = kept.enqueuer.result(a)
    assert result is not None
    assert (result.state, result.finished) == ("cancelled", True)
    assert result.finished_at is not None
    kept.run_once()
    assert payloads() == ["b"]
    assert kept.job(a, "dc_state", "dc_attempt", "errors") == (State.CANCELLED, 0, 0)
    assert kept.enqueuer.cancel([a, b, 10**9]) == 0  # cancelled, done, missing: left alone


def test_a_scheduled_job_is_cancelled_and_its_unique_key_is_free_again(kept: JobsEnv) -> None:
    job = kept.enqueuer.enqueue("record", "later", delay_s=3600, unique_key="k")
    assert kept.enqueuer.cancel([job]) == 1
    kept.make_due()  # its time comes: a cancelled job stays cancelled
    kept.run_once()
    assert payloads() == []
    assert kept.job(job, "dc_state")[0] == State.CANCELLED
    again = kept.enqueuer.enqueue("record", "again", unique_key="k")  # the key went with the cancel
    kept.run_once()
    assert payloads() == ["again"]
    assert kept.job(again, "dc_state")[0] == State.DONE


def test_cancelled_jobs_are_kept_as_long_as_dead_ones_then_pruned(env: JobsEnv) -> None:
    env = env.with_jobs(retention_s=60, dead_retention_s=7200)
    job = env.enqueuer.enqueue("record", "c")
    env.enqueuer.cancel(job)
    pruner = Pruner(env.store(), batch=10, interval_s=60)
    env.sql.execute(f"UPDATE `{env.table}` SET run_at = NOW(6) - INTERVAL 3600 SECOND WHERE id = %s", (job,))
    pruner.prune_all()
    assert env.exists(job)  # past the done jobs' retention, within the dead ones'
    env.sql.execute(f"UPDATE `{env.table}` SET run_at = NOW(6) - INTERVAL 7201 SECOND WHERE id = %s", (job,))
    pruner.prune_all()
    assert not env.exists(job)


def test_a_job_cancelled_in_a_dispatched_run_is_never_started(kept: JobsEnv) -> None:
    store = kept.store()
    a, b = kept.enqueuer.enqueue("record", "a"), kept.enqueuer.enqueue("record", "b")
    runs = store.claim_due(10)
    assert kept.enqueuer.cancel(a) == 1  # dispatched: its row still reads pending
    with store.started(runs) as batch:
        assert [int(r["id"]) for r in batch.rows] == [b]


def test_a_cancel_then_a_finish_the_finish_is_stale_and_never_retried(kept: JobsEnv) -> None:
    store = kept.store()
    ok, failing = kept.enqueuer.enqueue("record", "ok"), kept.enqueuer.enqueue("record", "failing")
    runs = store.claim_due(10)
    with store.started(runs) as batch:
        rows = {int(r["id"]): r for r in batch.rows}
        assert kept.enqueuer.cancel([ok, failing]) == 2  # running: their rows read pending
        counts = batch.ack([(rows[ok], Ack.default())])
        batch.fail([(rows[failing], RuntimeError("boom"))])  # would be retried after its backoff
    assert (counts.acked, counts.stale) == (0, 1)
    for job in (ok, failing):
        assert kept.job(job, "dc_state", "dc_attempt", "errors", "last_error") == (
            State.CANCELLED,
            0,
            0,
            None,
        )
    assert kept.runs("id") == []  # the run went with its last member's (stale) finish
    kept.make_due()
    assert store.claim_due(10) == []


def test_a_job_cancelled_while_running_is_replayed_only_once_its_run_let_it_go(kept: JobsEnv) -> None:
    """Pending again while its run still holds it, the run's late finish would apply to it."""
    store, admin = kept.store(), JobAdmin(Database(kept.settings.mysql), kept.settings.jobs)
    job = kept.enqueuer.enqueue("record", "r")
    (run,) = store.claim_due(10)
    with store.started([run]) as batch:
        kept.enqueuer.cancel(job)
        out = admin.revive(Filter(ids=[int(job)]))
        assert (out.matched, out.changed, out.in_flight) == (1, 0, 1)
        assert batch.ack([(batch.rows[0], Ack.default())]).stale == 1
    out = admin.revive(Filter(ids=[int(job)]))
    assert (out.changed, out.in_flight) == (1, 0)
    assert kept.job(job, "dc_state")[0] == State.IDLE


def test_a_finish_then_a_cancel_the_cancel_changes_nothing(kept: JobsEnv) -> None:
    store = kept.store()
    job = kept.enqueuer.enqueue("record", "r")
    (run,) = store.claim_due(10)
    with store.started([run]) as batch:
        assert batch.ack([(batch.rows[0], Ack.default())]).acked == 1
    assert kept.enqueuer.cancel(job) == 0
    assert kept.job(job, "dc_state")[0] == State.DONE


# ---------------------------------------------------------------- racing on the row's lock


@pytest.fixture
def other(kept: JobsEnv) -> Iterator[pymysql.connections.Connection]:
    """A second session, its transaction left open to hold a job row's lock."""
    conn = connect(kept.settings.mysql)
    yield conn
    conn.rollback()
    conn.close()


def waiting(env: JobsEnv, state: State) -> Callable[[], bool]:
    """Whether another session is inside an UPDATE of this test's jobs table to `state` (one that
    waits for a row lock stays there until the lock is freed or its wait times out)."""

    def check() -> bool:
        env.sql.execute(
            "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE command = 'Query' AND info LIKE %s",
            (f"UPDATE `{env.table}`% SET `dc_state` = {int(state)},%",),  # (FORCE INDEX (PRIMARY))
        )
        return int(env.sql.fetchone()[0]) > 0

    return check


def in_thread(call: Callable[[], Any]) -> tuple[threading.Thread, list[Any]]:
    out: list[Any] = []
    thread = threading.Thread(target=lambda: out.append(call()), daemon=True)
    thread.start()
    return thread, out


def test_a_finish_waiting_on_an_uncommitted_cancel_finds_it_cancelled_and_is_stale(
    kept: JobsEnv, other: pymysql.connections.Connection
) -> None:
    store = kept.store()
    job = kept.enqueuer.enqueue("record", "r")
    (run,) = store.claim_due(10)
    with store.started([run]) as batch:
        with other.cursor() as cur:  # the cancel, not yet committed: it holds the row
            assert cur.execute(render_jobs(kept.table).cancel.format(ids=in_list("`id`", [int(job)]))) == 1
        thread, out = in_thread(lambda: batch.ack([(batch.rows[0], Ack.default())]))
        wait_until(waiting(kept, State.DONE), "the finish to wait for the cancel's lock")
        other.commit()
        thread.join(timeout=30)
    (counts,) = out
    assert (counts.acked, counts.stale) == (0, 1)
    assert kept.job(job, "dc_state", "dc_attempt")[0:2] == (State.CANCELLED, 0)


def test_a_cancel_waiting_on_an_uncommitted_finish_finds_it_done_and_changes_nothing(
    kept: JobsEnv, other: pymysql.connections.Connection
) -> None:
    store = kept.store()
    job = kept.enqueuer.enqueue("record", "r")
    (run,) = store.claim_due(10)
    with store.started([run]) as batch:
        started_at = kept.run_of(job, "started_at")[0]
        with other.cursor() as cur:  # the worker's finish of this member, not yet committed
            finish = store.runs.finish_done.format(ids=in_list("`id`", [int(job)]))
            assert cur.execute(finish, (store.worker, started_at)) == 1
        thread, out = in_thread(lambda: kept.enqueuer.cancel(job))
        wait_until(waiting(kept, State.CANCELLED), "the cancel to wait for the finish's lock")
        other.commit()
        thread.join(timeout=30)
        assert batch.rows  # (the batch closes unacked: its run's lease runs out, its job is done)
    assert out == [0]
    assert kept.job(job, "dc_state", "dc_attempt") == (State.DONE, 1)


# ---------------------------------------------------------------- on a live worker


@pytest.fixture
def live(env: JobsEnv) -> Iterator[JobsEnv]:
    """A dispatcher and a worker serving the cancel app, leases of LEASE_S."""
    cancel_app.EVENTS.clear()
    served = env.with_app("tests.integration.cancel_app", cancel_app.handlers.task_names, concurrency=2)
    served = served.with_jobs(lease_s=LEASE_S, retention_s=3600)
    stop = threading.Event()
    threads = [
        threading.Thread(target=serve_dispatcher, args=(served.settings, stop), daemon=True),
        threading.Thread(target=serve_worker, args=(served.settings, stop), daemon=True),
    ]
    for t in threads:
        t.start()
    try:
        yield served
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=30)


def test_a_running_async_task_is_cancelled_within_a_third_of_its_lease(live: JobsEnv) -> None:
    job = live.enqueuer.enqueue("sleep_async", "s")
    wait_until(lambda: "started" in cancel_app.seen("s"), "the async task to start")
    told = cancel_app.time.monotonic()
    assert live.enqueuer.cancel(job) == 1
    wait_until(lambda: "cancelled" in cancel_app.seen("s"), "the task to be cancelled", timeout_s=LEASE_S)
    assert cancel_app.at("s", "cancelled") - told <= LEASE_S / 3 + 0.5
    wait_until(lambda: live.runs("id") == [], "its run to go with its stale finish")
    assert live.job(job, "dc_state", "dc_attempt", "errors") == (State.CANCELLED, 0, 0)
    assert cancel_app.seen("s") == ["started", "cancelled"]


def test_a_running_plain_task_sees_it_and_its_failure_is_never_retried(live: JobsEnv) -> None:
    job = live.enqueuer.enqueue("wait_plain", "p", max_attempts=5)
    other = live.enqueuer.enqueue("quick", "q", delay_s=0)
    wait_until(lambda: "started" in cancel_app.seen("p"), "the plain task to start")
    assert live.enqueuer.cancel(job) == 1
    wait_until(lambda: "saw cancelled" in cancel_app.seen("p"), "the task to see it", timeout_s=LEASE_S)
    wait_until(lambda: live.runs("id") == [], "its run to go with its stale finish")
    # It raised: a failure with attempts left would be pending again; cancelled, nothing changed.
    assert live.job(job, "dc_state", "dc_attempt", "errors", "last_error") == (State.CANCELLED, 0, 0, None)
    assert cancel_app.seen("p") == ["started", "saw cancelled"]
    wait_until(lambda: live.job(other, "dc_state")[0] == State.DONE, "the other job to run")
