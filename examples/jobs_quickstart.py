"""A runnable tour of one-off jobs: tasks, enqueue (one, many, unique, delayed, in your transaction),
retries to dead, and a recurring schedule; a dispatcher and a worker drain it all in-process.

    scripts/dev shell python -m duecast.examples.jobs_quickstart

Uses the configured database and key prefix (DUECAST_* / DUECAST_CONFIG), in its own tables
`example_jobs` / `example_schedules`, which it drops at the end.
"""

from __future__ import annotations

import threading
from typing import Any

from duecast import Ack, DuplicateJob, Enqueuer, Job, Registry
from duecast.dispatcher.main import serve as serve_dispatcher
from duecast.shared.settings import Settings, load_settings
from duecast.shared.states import STATE_NAMES, State
from duecast.shared.storage.admin import migrate
from duecast.shared.storage.db import connect
from duecast.worker.main import serve as serve_worker

tasks = Registry()
seen: list[str] = []


@tasks.task("send_welcome")
def send_welcome(payload: Any) -> None:
    seen.append(f"welcome {payload['email']}")


@tasks.task("flaky")
def flaky(payload: Any) -> None:
    seen.append("flaky ran")
    raise RuntimeError("the mail server said no")


@tasks.task("maybe_later")
def maybe_later(payload: Any) -> Ack:
    seen.append("maybe_later ran")
    return Ack.retry(delay_s=3600)  # not an error: run again in an hour


@tasks.task("audit", transactional=True)
def audit(payload: Any, cursor: Any) -> None:
    # Runs in the worker's ack transaction: this row commits if and only if the job is done.
    cursor.execute("INSERT INTO example_audit (note) VALUES (%s)", (payload,))
    seen.append(f"audited {payload}")


def main() -> None:
    base = load_settings()
    jobs = base.jobs.model_copy(
        update={"table": "example_jobs", "schedules_table": "example_schedules", "retry_base_s": 1.0}
    )
    settings = base.model_copy(
        update={
            "jobs": jobs,
            "sources": [],
            # This very module (as __main__ when run with -m), so the worker sees this `seen` list.
            "worker": base.worker.model_copy(update={"app": f"{__name__}:tasks"}),
        }
    )
    migrate.apply(settings)
    conn = connect(settings.mysql)
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE IF NOT EXISTS example_audit (id INT AUTO_INCREMENT PRIMARY KEY, note TEXT)")
    try:
        tour(settings, conn)
    finally:
        with conn.cursor() as cur:
            cur.execute("DROP TABLE IF EXISTS example_jobs, example_schedules, example_audit")
        conn.close()


def tour(settings: Settings, conn: Any) -> None:
    enqueuer = Enqueuer.from_settings(settings, tasks=tasks.task_names)
    enqueuer.enqueue("send_welcome", {"email": "ada@example.com"})
    enqueuer.enqueue_many(Job("send_welcome", {"email": f"user{i}@example.com"}) for i in range(3))
    enqueuer.enqueue("flaky", None, max_attempts=2)
    enqueuer.enqueue("maybe_later", None)
    enqueuer.enqueue("send_welcome", {"email": "later@example.com"}, delay_s=600)
    enqueuer.enqueue("send_welcome", {"email": "once@example.com"}, unique_key="welcome:once")
    try:
        enqueuer.enqueue("send_welcome", {"email": "once@example.com"}, unique_key="welcome:once")
    except DuplicateJob as exc:
        print(f"refused a duplicate: {exc}")
    # The transactional outbox: your rows and your jobs commit together, or neither does.
    with conn.cursor() as cur:
        cur.execute("INSERT INTO example_audit (note) VALUES ('signed up')")
        enqueuer.enqueue("audit", "sign-up checked", conn=conn)  # in your transaction: not committed
    conn.commit()
    enqueuer.wake()  # start it now (a plain driver connection has no on-commit hook to do it)

    drain(settings)
    with conn.cursor() as cur:  # let the flaky job's backoff pass, in SQL, and drain again
        cur.execute("UPDATE example_jobs SET run_at = NOW(6) WHERE task = 'flaky'")
    conn.commit()
    drain(settings)

    print("ran:", "; ".join(seen))
    print("left in the jobs table (done jobs are deleted: jobs.retention_s = 0):")
    with conn.cursor() as cur:
        cur.execute("SELECT id, task, dc_state, errors, last_error FROM example_jobs ORDER BY id")
        for job_id, task, state, errors, error in cur.fetchall():
            last = (error or "").strip().splitlines()[-1:] or [""]
            print(f"job {job_id} {task}: {STATE_NAMES[State(state)]}, {errors} error(s) {last[0]}")
    conn.commit()


def drain(settings: Settings) -> None:
    serve_dispatcher(settings, threading.Event(), drain=True)
    serve_worker(settings, threading.Event(), drain=True)


if __name__ == "__main__":
    main()
