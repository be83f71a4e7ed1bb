"""One-off jobs on real MariaDB + Redis: unique keys, queues and priorities, delayed and timed jobs,
status by queue, enqueue_many's ids, and a task seeing its own job.

Time passes by back-dating run_at / lease_until / last_run_at in SQL, never by sleeping.
"""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

import pytest

from duecast.dispatcher.main import serve as serve_dispatcher
from duecast.shared.api.enqueue import DuplicateJob, EnqueueError, Enqueuer, Job
from duecast.shared.states import State
from duecast.worker.main import serve as serve_worker
from tests.integration import jobs_app
from tests.integration.jobs.jobs_env import JobsEnv, payloads

pytestmark = pytest.mark.integration


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
        "cancelled": 0,
    }
    assert status.in_flight == 1
    assert status.oldest_due_age_s is not None
    assert status.oldest_due_age_s >= 0


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
