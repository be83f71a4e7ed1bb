"""DuecastBackend: Django's task API onto duecast's jobs. `enqueue` writes a job on Django's own
connection (in the caller's `atomic()` when there is one, so the job exists only if it commits);
`get_result` reads the job back as a TaskResult. The worker side is worker.py."""

from __future__ import annotations

from inspect import iscoroutinefunction
from typing import Any

from django.core import checks
from django.db import connections
from django.utils import timezone
from django.utils.module_loading import import_string

from ...shared.api.enqueue import Enqueuer
from ...shared.settings import Settings, load_settings
from ...shared.storage.job_results import JobResult, read_job
from .api import (
    BaseTaskBackend,
    ResultDoesNotExist,
    Task,
    TaskError,
    TaskResult,
    TaskResultStatus,
    task_enqueued,
)
from .calls import ASYNC, PLAIN, aware, duecast_priority, exception_path, payload, status_of


class DuecastBackend(BaseTaskBackend):  # type: ignore[misc]
    """TASKS = {"default": {"BACKEND": "duecast.integrations.django.DuecastBackend", "QUEUES": [...],
    "OPTIONS": {"DATABASE": "default", "CONFIG": None}}}: DATABASE is the Django database alias
    whose database holds duecast's jobs table; CONFIG a duecast TOML file (default: DUECAST_* and
    DUECAST_CONFIG, as every duecast role reads them)."""

    supports_defer = True  # run_after
    supports_async_task = True
    supports_get_result = True  # while done jobs are kept: jobs.retention_s
    supports_priority = True

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        super().__init__(alias, params)
        self.database = str(self.options.get("DATABASE", "default"))
        # Django's API has no retries: a task that raises is FAILED. duecast's default is the same
        # (one attempt); a worker's death still runs it again (at least once).
        self.max_attempts = int(self.options.get("MAX_ATTEMPTS", 1))
        self._config = self.options.get("CONFIG")
        self._settings: Settings | None = None
        self._enqueuer: Enqueuer | None = None

    @property
    def enqueuer(self) -> Enqueuer:
        """duecast's writer (made at first use: settings are read then, not at import)."""
        if self._enqueuer is None:
            self._enqueuer = Enqueuer.from_settings(self.settings)
        return self._enqueuer

    @property
    def settings(self) -> Settings:
        if self._settings is None:
            self._settings = load_settings(self._config)
        return self._settings

    def enqueue(self, task: Task, args: Any, kwargs: Any) -> TaskResult:
        self.validate_task(task)
        job = payload(task.module_path, args, kwargs)
        job_id = self.enqueuer.enqueue(
            ASYNC if iscoroutinefunction(task.func) else PLAIN,
            job,
            queue=task.queue_name,
            priority=duecast_priority(task.priority),
            run_at=task.run_after,
            max_attempts=self.max_attempts,
            conn=connections[self.database],  # the caller's atomic() if open; woken at its commit
        )
        result = TaskResult(
            task=task,
            id=str(job_id),
            status=TaskResultStatus.READY,
            enqueued_at=timezone.now(),
            started_at=None,
            finished_at=None,
            last_attempted_at=None,
            args=job["args"],
            kwargs=job["kwargs"],
            backend=self.alias,
            errors=[],
            worker_ids=[],
        )
        task_enqueued.send(type(self), task_result=result)
        return result

    def get_result(self, result_id: str) -> TaskResult:
        try:
            job = read_job(connections[self.database], self.enqueuer.sql, int(result_id))
        except ValueError:
            job = None  # not a duecast job id
        if job is None:
            raise ResultDoesNotExist(result_id)
        return self._task_result(job)

    def check(self, **kwargs: Any) -> list[checks.CheckMessage]:
        """Django's system checks (`manage.py check`, runserver): settings that would lose results
        or enqueue where no worker looks."""
        settings = self.settings
        found: list[checks.CheckMessage] = []
        if settings.jobs.retention_s == 0:
            found.append(
                checks.Warning(
                    "duecast deletes done jobs at once (jobs.retention_s = 0): get_result() of a task that "
                    "succeeded raises ResultDoesNotExist",
                    hint="set DUECAST_JOBS__RETENTION_S (e.g. 86400) to keep results a day",
                    id="duecast.W001",
                )
            )
        missing = sorted(set(self.queues) - set(settings.jobs.queues))
        if missing:
            found.append(
                checks.Error(
                    f"TASKS[{self.alias!r}] QUEUES {missing} are not in duecast's jobs.queues "
                    f"{settings.jobs.queues}",
                    hint="add them to DUECAST_JOBS__QUEUES: no duecast worker would run them",
                    id="duecast.E001",
                )
            )
        name = connections[self.database].settings_dict.get("NAME")
        if name != settings.mysql.database:
            found.append(
                checks.Error(
                    f"DATABASES[{self.database!r}] is {name!r} but duecast's mysql.database is "
                    f"{settings.mysql.database!r}: jobs enqueued in atomic() would not be in duecast's table",
                    hint="point both at one database, or set OPTIONS['DATABASE'] to the alias of duecast's",
                    id="duecast.E002",
                )
            )
        return found

    def _task_result(self, job: JobResult) -> TaskResult:
        call = job.payload if isinstance(job.payload, dict) else {}
        task = import_string(str(call.get("task")))
        status = status_of(job.state, TaskResultStatus)
        errors = []
        if status == TaskResultStatus.FAILED and job.error:
            errors.append(TaskError(exception_class_path=exception_path(job.error), traceback=job.error))
        result = TaskResult(
            task=task,
            id=str(job.id),
            status=status,
            enqueued_at=aware(job.enqueued_at),
            started_at=aware(job.started_at),
            finished_at=aware(job.finished_at),
            last_attempted_at=aware(job.started_at),
            args=call.get("args", []),
            kwargs=call.get("kwargs", {}),
            backend=self.alias,
            errors=errors,
            worker_ids=["duecast"] * job.attempts,  # Django counts attempts by worker ids
        )
        object.__setattr__(result, "_return_value", job.value)  # as Django's own backends set it
        return result
