"""Recurring schedules: APScheduler triggers built from settings, and the pure "which runs are due" rule.

No I/O: the dispatcher's Recurring duty reads the time and last run from MySQL and asks `due_runs`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Literal, Protocol

from .settings import ScheduleSettings

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_SCAN_LIMIT = 100_000  # fire times looked at per call: bounds a tick after very long downtime
_TINY = timedelta(microseconds=1)
# crontab weekday numbers (0 or 7 = Sunday) -> names, because APScheduler 3 counts 0 = Monday.
_WEEKDAYS = ["sun", "mon", "tue", "wed", "thu", "fri", "sat", "sun"]
_WEEKDAY_NUMBER = re.compile(r"(?<![/\d])\d+")


class Trigger(Protocol):
    def get_next_fire_time(self, previous_fire_time: datetime | None, now: datetime) -> datetime | None: ...


def build_trigger(schedule: ScheduleSettings) -> Trigger:
    """The APScheduler trigger of a schedule; raises ValueError for a bad cron text or time zone.

    Interval schedules are aligned to the Unix epoch, so every dispatcher computes the same fire
    times (that is what makes the (schedule, time) unique key work).
    """
    if schedule.every_s is not None:
        # APScheduler loads with the first schedule: a dispatcher without one never imports it.
        from apscheduler.triggers.interval import IntervalTrigger  # noqa: PLC0415

        return IntervalTrigger(seconds=schedule.every_s, start_date=EPOCH, timezone="UTC")  # type: ignore[no-any-return]
    return cron_trigger(schedule.cron or "", schedule.timezone)


def cron_trigger(expr: str, timezone: str = "UTC") -> Trigger:
    """A cron text of five fields (minute hour day month weekday), or six with seconds first.

    Weekday numbers mean what they mean in crontab (0 and 7 are Sunday); names work too.
    """
    fields = expr.split()
    if len(fields) not in (5, 6):
        raise ValueError(f"cron {expr!r}: expected 5 fields (or 6 with seconds first), got {len(fields)}")
    second = fields.pop(0) if len(fields) == 6 else "0"
    minute, hour, day, month, weekday = fields
    weekday = _WEEKDAY_NUMBER.sub(lambda m: _weekday_name(m.group(0), expr), weekday)
    from apscheduler.triggers.cron import CronTrigger  # noqa: PLC0415 - as in build_trigger

    try:
        return CronTrigger(  # type: ignore[no-any-return]
            second=second,
            minute=minute,
            hour=hour,
            day=day,
            month=month,
            day_of_week=weekday,
            timezone=timezone,
        )
    except (ValueError, LookupError) as exc:  # bad fields; unknown zones raise a LookupError subclass
        raise ValueError(f"cron {expr!r} in {timezone}: {exc}") from exc


def _weekday_name(number: str, expr: str) -> str:
    n = int(number)
    if n > 7:
        raise ValueError(f"cron {expr!r}: weekday {n} is not 0-7")
    return _WEEKDAYS[n]


@dataclass(frozen=True)
class DueRuns:
    runs: list[datetime]  # fire times to enqueue now, oldest first (UTC)
    last: datetime  # the new last_run_at: the latest fire time <= now, enqueued or skipped
    missed: int  # fire times passed over (coalesced, skipped, or beyond the backfill cap)


def due_runs(
    trigger: Trigger,
    *,
    last: datetime,
    now: datetime,
    missed: Literal["coalesce", "all", "skip"],
    backfill_max: int,
    grace_s: float,
) -> DueRuns:
    """The fire times in (last, now] and which of them to run, by the schedule's `missed` policy.

    A time within `grace_s` of now is on time, not missed: every policy runs it. Older ones were
    missed (downtime): "coalesce" runs the latest of them once (unless an on-time run exists),
    "all" runs the latest `backfill_max`, "skip" runs none.
    """
    times: list[datetime] = []
    t = trigger.get_next_fire_time(None, last + _TINY)
    while t is not None and t <= now and len(times) < _SCAN_LIMIT:
        times.append(t.astimezone(UTC))
        t = trigger.get_next_fire_time(t, t + _TINY)
    if not times:
        return DueRuns([], last, 0)
    on_time = [x for x in times if (now - x).total_seconds() <= grace_s]
    late = times[: len(times) - len(on_time)]
    if missed == "all":
        chosen = (late + on_time)[-backfill_max:]
    elif missed == "coalesce":
        chosen = on_time or late[-1:]
    else:
        chosen = on_time
    return DueRuns(chosen, times[-1], len(times) - len(chosen))
