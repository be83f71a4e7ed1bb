"""One-off jobs on real MariaDB + Redis: recurring schedules under two dispatchers and missed runs
after downtime.

Time passes by back-dating run_at / lease_until / last_run_at in SQL, never by sleeping.
"""

from __future__ import annotations

import itertools
import threading
from collections import Counter
from datetime import timedelta

import pytest

from duecast.dispatcher.main import serve as serve_dispatcher
from duecast.dispatcher.recurring import Recurring
from duecast.shared.api.enqueue import Enqueuer
from duecast.shared.settings import ScheduleSettings
from duecast.shared.storage.db import Database
from duecast.shared.storage.schedule_store import ScheduleStore
from tests.integration.jobs.jobs_env import JobsEnv
from tests.integration.polling import wait_until

pytestmark = pytest.mark.integration


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
