"""What is dispatched: re-scan sources, one-off job queues, and recurring schedules."""

from __future__ import annotations

from typing import Annotated, Any, Literal, Self

from pydantic import Field, model_validator

from ..limits import MAX_DELAY_S
from .base import Identifier, _Section
from .limits import KeyLimits, Limits, unit_refusal

JOBS_SOURCE = "jobs"


class SourceSettings(Limits):
    """One table duecast dispatches from, and how a row of it becomes due (and its fleet-wide limits)."""

    # A job queue's source is `jobs.<queue>`; configured sources may not use a dot (checked in Settings).
    name: str = Field(pattern=r"^[a-z][a-z0-9_]{0,47}(\.[a-z0-9][a-z0-9_-]{0,47})?$")
    table: Identifier
    id_column: Identifier = "id"
    due_column: Identifier
    # A row is due when due_column <= NOW(6) - period_s. A re-scan source (check every 10 s) sets
    # the period; a `due_at` style column uses 0.
    period_s: float = Field(0.0, ge=0, le=366 * 86400)
    # What a handler's plain success does: "touch" sets due_column to the check's slot, the latest
    # time at or before NOW(6) at the row's phase in the period (re-scan; an even pace:
    # docs/protecting.md); "delete" removes the row (one-off work).
    on_success: Literal["touch", "delete"] = "touch"
    claim_batch: int = Field(2000, ge=1, le=10_000)
    high_water: int = Field(40_000, ge=1, le=10_000_000)
    visibility_timeout_s: float = Field(60.0, ge=1, le=86400)
    # A started row's (or span's) lease: its worker extends it every lease_s/3 while the check
    # runs, and exits without acking if it could not for 0.8 of it (self-fencing); a row whose
    # lease ran out was interrupted (its worker died or stopped) and is due again at once.
    lease_s: float = Field(15.0, ge=2, le=86400)
    # A check's time limit, enforced by the worker: an async handler is cancelled at it, a sync
    # one is given up (its thread left to finish) and counted; either way the check failed and the
    # row is checked again (a re-scan row at its next period).
    timeout_s: float = Field(30.0, gt=0, le=7 * 86400)
    # "rows": dispatch state in each row (dc_* columns): per-row due times, three row writes per
    # check (claim, start, ack). "ranges": dispatch state per span of `range_size` ids in
    # duecast's own dc_ranges_<name> table; a business row is written only when its handler
    # changes it. For re-scan sources (period_s > 0). claim_batch and high_water still count rows.
    mode: Literal["rows", "ranges"] = "rows"
    range_size: int = Field(1000, ge=1, le=100_000)

    @model_validator(mode="after")
    def _coherent(self) -> Self:
        if self.mode == "ranges" and (self.period_s == 0 or self.on_success != "touch"):
            raise ValueError(
                f"source {self.name}: mode='ranges' is for re-scan sources: it needs period_s > 0 "
                "and on_success='touch'"
            )
        refusal = unit_refusal(self.name, self, self.range_size if self.mode == "ranges" else 1, "range_size")
        if refusal is not None:
            raise ValueError(refusal)
        if self.claim_batch > self.high_water:
            raise ValueError(
                f"source {self.name}: claim_batch ({self.claim_batch}) must be <= high_water "
                f"({self.high_water}), or the dispatcher could never claim a full batch"
            )
        if self.on_success == "touch" and self.period_s == 0:
            raise ValueError(
                f"source {self.name}: on_success='touch' with period_s=0 would make every row due "
                "again at once; set period_s > 0 or on_success='delete'"
            )
        return self


QueueName = Annotated[str, Field(pattern=r"^[a-z0-9][a-z0-9_-]{0,47}$")]
# A task named in `[jobs.task_limits]`: its bucket's row is `task:<name>` (shared.limit_names), which
# must fit the limits table's 191 characters.
TaskName = Annotated[str, Field(min_length=1, max_length=186)]


class ScheduleSettings(_Section):
    """A recurring job: one job of `task` per fire time of `cron` or `every_s` (second granularity)."""

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}$")
    task: str = Field(min_length=1, max_length=191)
    # Five fields (minute hour day month weekday) or six with seconds first; APScheduler's syntax.
    cron: str | None = None
    every_s: float | None = Field(None, ge=1, le=366 * 86400)
    timezone: str = "UTC"  # the zone cron fields are read in
    payload: Any = None
    queue: QueueName = "default"
    priority: int = Field(0, ge=0, le=9)
    # After downtime: "coalesce" runs the latest missed time once, "all" runs every missed time
    # (at most jobs.schedule_backfill_max), "skip" runs none and waits for the next one.
    missed: Literal["coalesce", "all", "skip"] = "coalesce"

    @model_validator(mode="after")
    def _one_trigger(self) -> Self:
        if (self.cron is None) == (self.every_s is None):
            raise ValueError(f"schedule {self.name}: set exactly one of cron and every_s")
        return self


class JobsSettings(_Section):
    """duecast's own one-off jobs table: each queue is dispatched like a source of its own."""

    enabled: bool = True
    table: Identifier = "duecast_jobs"
    schedules_table: Identifier = "duecast_schedules"
    # Jobs go to one of these queues (enqueueing to another is an error); each gets its own ready
    # list, and workers serve the queues in worker.queues order (default: this order).
    queues: list[QueueName] = Field(default_factory=lambda: ["default"], min_length=1)
    max_payload_bytes: int = Field(65_536, ge=16, le=16 * 1024 * 1024)  # JSON text, UTF-8
    # How far ahead anything may be put off: a job's enqueue (delay_s, run_at) and every handler's
    # Ack.retry / Ack.touch(delay_s=...) (shared/limits.py): 10 years. Further is refused as a
    # mistake (a delay in ms passed as s), and keeps run_at far from DATETIME's end.
    max_delay_s: float = Field(MAX_DELAY_S, ge=1, le=100 * 366 * 86400)
    max_attempts: int = Field(20, ge=1, le=10_000)  # default per job: failed runs before dead
    max_interruptions: int = Field(3, ge=1, le=1000)  # runs whose worker died, before dead
    retry_base_s: float = Field(2.0, gt=0, le=86400)  # backoff after the first failure...
    retry_cap_s: float = Field(3600.0, gt=0, le=30 * 86400)  # ...doubling up to this, with jitter
    # A RUNNING job's lease: its worker extends it every lease_s/3 while the handler runs, and exits
    # without acking if it could not for 0.8 of it (self-fencing); a job whose lease ran out was
    # interrupted (its worker died) and is run again, or dead after max_interruptions.
    lease_s: float = Field(15.0, ge=2, le=86400)
    # A task's run taking longer is a failure (retried with backoff, counted towards max_attempts):
    # an async task is cancelled, a plain one given up (its thread left to finish; a worker with
    # most threads stuck exits and is replaced). Per task: @tasks.task(name, timeout_s=...).
    timeout_s: float = Field(1800.0, ge=1, le=7 * 86400)
    retention_s: float = Field(0.0, ge=0, le=366 * 86400)  # keep done jobs this long; 0 = delete at once
    # A task's return value is kept with its done job (so only when retention_s > 0), as JSON text
    # of at most this many bytes; a larger one is not kept, and last_error says so. 0: keep none.
    max_result_bytes: int = Field(65_536, ge=0, le=16 * 1024 * 1024)
    dead_retention_s: float = Field(30 * 86400.0, ge=0, le=10 * 366 * 86400)  # 0 = keep dead jobs forever
    prune_interval_s: float = Field(60.0, gt=0, le=86400)
    prune_batch: int = Field(5000, ge=1, le=100_000)
    schedules: list[ScheduleSettings] = []
    schedule_backfill_max: int = Field(100, ge=1, le=100_000)
    claim_batch: int = Field(2000, ge=1, le=10_000)
    high_water: int = Field(40_000, ge=1, le=10_000_000)
    visibility_timeout_s: float = Field(60.0, ge=1, le=86400)  # dispatched but never started
    # Jobs are dispatched in runs: consecutive due jobs of one queue and priority, one row of the
    # runs table and one ready-list entry for up to this many (docs/architecture.md, "Job runs").
    # claim_batch and high_water count jobs.
    run_size: int = Field(500, ge=1, le=10_000)
    # Fleet-wide limits per queue, `[jobs.limits.<queue>]` (settings/limits.py): jobs, not runs.
    limits: dict[QueueName, Limits] = {}
    # Fleet-wide limits per task, `[jobs.task_limits.<task>]`: its jobs in every queue count, and
    # its jobs are claimed by their own statement (docs/protecting.md, "Task limits").
    task_limits: dict[TaskName, Limits] = {}
    # Per concurrency key of a queue, `[jobs.key_limits.<queue>]`: its keyed jobs are claimed key by
    # key, in turn, at most max_running_per_key each (docs/protecting.md, "Concurrency keys").
    key_limits: dict[QueueName, KeyLimits] = {}

    @property
    def runs_table(self) -> str:
        """The jobs' runs (dispatch, start, lease and fence of a run of jobs): `<table>_runs`."""
        return f"{self.table}_runs"

    @property
    def cursors_table(self) -> str:
        """How far each queue and priority has been dispatched: `<table>_cursors`."""
        return f"{self.table}_cursors"

    @model_validator(mode="after")
    def _coherent(self) -> Self:
        if len(self.cursors_table) > 64:
            raise ValueError(
                f"jobs.table {self.table!r} is too long: its {self.cursors_table!r} must fit MySQL's "
                "64 characters"
            )
        dupes = sorted({q for q in self.queues if self.queues.count(q) > 1})
        if dupes:
            raise ValueError(f"jobs.queues repeats {', '.join(dupes)}")
        names = [s.name for s in self.schedules]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"jobs.schedules: names must be unique; repeated: {', '.join(dupes)}")
        for sched in self.schedules:
            if sched.queue not in self.queues:
                raise ValueError(
                    f"schedule {sched.name}: queue {sched.queue!r} is not in jobs.queues "
                    f"({', '.join(self.queues)})"
                )
        unknown = sorted(q for q in self.limits if q not in self.queues)
        if unknown:
            raise ValueError(
                f"jobs.limits names {', '.join(unknown)}, not in jobs.queues ({', '.join(self.queues)})"
            )
        self._coherent_keys()
        if self.task_limits and not self.enabled:
            raise ValueError(
                "jobs.task_limits is set but jobs.enabled is false: no job is dispatched to limit"
            )
        idle = sorted(t for t, lim in self.task_limits.items() if not lim.limited)
        if idle:
            raise ValueError(
                f"jobs.task_limits.{idle[0]} sets no limit: set rate_limit_per_s or max_running, or "
                "leave the task out"
            )
        if self.retry_base_s > self.retry_cap_s:
            raise ValueError("jobs.retry_base_s must be <= jobs.retry_cap_s")
        return self

    def _coherent_keys(self) -> None:
        unknown = sorted(q for q in self.key_limits if q not in self.queues)
        if unknown:
            raise ValueError(
                f"jobs.key_limits names {', '.join(unknown)}, not in jobs.queues ({', '.join(self.queues)})"
            )
        if self.key_limits and not self.enabled:
            raise ValueError(
                "jobs.key_limits is set but jobs.enabled is false: no job is dispatched to limit"
            )
        if self.key_limits and self.task_limits:
            # A limited task's jobs are claimed by their own statement, which does not count keys.
            raise ValueError("jobs.key_limits and jobs.task_limits cannot both be set (yet); use one")

    def queue_sources(self) -> list[SourceSettings]:
        """One dispatchable source per queue, named `jobs.<queue>` (its ready list's name)."""
        return [
            SourceSettings(
                name=f"{JOBS_SOURCE}.{queue}",
                table=self.table,
                id_column="id",
                due_column="run_at",
                period_s=0,
                on_success="delete",
                claim_batch=self.claim_batch,
                high_water=self.high_water,
                visibility_timeout_s=self.visibility_timeout_s,
                lease_s=self.lease_s,  # its store's lease keeper (shared/storage/leased) runs on it
                timeout_s=self.timeout_s,  # a task's default time limit (a task may set its own)
                **self.limits.get(queue, Limits()).model_dump(),
            )
            for queue in self.queues
        ]
