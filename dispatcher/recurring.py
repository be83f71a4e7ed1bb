"""Recurring: the dispatcher duty that turns schedules (settings and the app's code) into jobs.

A leader duty of the dispatcher (dispatcher/scheduler.py), every second; `tick()` fires every schedule.
"""

from __future__ import annotations

import logging

from ..shared.api.job_input import Job, encode
from ..shared.process.failures import log_failure
from ..shared.process.loop import Tick
from ..shared.schedules import Trigger, build_trigger
from ..shared.settings import ScheduleSettings
from ..shared.storage.job_writer import JobRow
from ..shared.storage.schedule_store import ScheduleStore

log = logging.getLogger("duecast.recurring")

TICK_S = 1.0  # second granularity


class Recurring:
    name = "recurring"

    def __init__(self, store: ScheduleStore, schedules: list[ScheduleSettings]) -> None:
        self.store = store
        for s in schedules:
            if s.queue not in store.jobs.queues:
                raise ValueError(f"schedule {s.name}: queue {s.queue!r} is not in jobs.queues")
            tasks = store.enqueuer.tasks
            if tasks is not None and s.task not in tasks:
                raise ValueError(f"schedule {s.name}: the app has no task {s.task!r}")
        # Built once at start-up: a bad cron text or zone fails the process, not every tick.
        self.schedules: list[tuple[ScheduleSettings, Trigger]] = [(s, build_trigger(s)) for s in schedules]
        self.enqueued = 0

    def tick(self) -> Tick:
        for schedule, trigger in self.schedules:
            try:
                n = self.store.fire_due(schedule, trigger, self._job(schedule))
            except Exception as exc:
                # One broken schedule (a task renamed, a lock timeout) must not stop the others.
                log_failure(log, exc, "schedule %s failed; retrying next tick", schedule.name)
                continue
            if n:
                log.info("schedule %s: enqueued %d run(s)", schedule.name, n)
                self.enqueued += n
                self.store.enqueuer.wake()
        return Tick(TICK_S, idle=True)

    def _job(self, schedule: ScheduleSettings) -> JobRow:
        """The job a run of `schedule` enqueues, checked (the store adds its schedule and fire time)."""
        job = Job(schedule.task, schedule.payload, schedule.queue, priority=schedule.priority)
        return encode(job, self.store.jobs, self.store.enqueuer.tasks)
