"""Recurring schedules, pure: cron parsing (crontab weekdays), epoch-aligned intervals, and which
fire times run after downtime under each `missed` policy."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from pydantic import ValidationError

from duecast.shared.schedules import build_trigger, cron_trigger, due_runs
from duecast.shared.settings import JobsSettings, ScheduleSettings

T0 = datetime(2026, 11, 20, 12, 0, 0, tzinfo=UTC)  # a Friday


def test_six_fields_put_seconds_first_and_five_fields_fire_on_the_minute() -> None:
    every_15s = cron_trigger("*/15 * * * * *")
    assert every_15s.get_next_fire_time(None, T0 + timedelta(seconds=1)) == T0 + timedelta(seconds=15)
    hourly = cron_trigger("0 * * * *")
    assert hourly.get_next_fire_time(None, T0 + timedelta(seconds=1)) == T0 + timedelta(hours=1)


@pytest.mark.parametrize(
    ("weekday", "expected_day"), [("0", 22), ("7", 22), ("1", 23), ("sun", 22), ("1-5", 23)]
)
def test_weekday_numbers_mean_what_they_mean_in_crontab(weekday: str, expected_day: int) -> None:
    # APScheduler 3 counts 0 = Monday; duecast translates crontab's 0/7 = Sunday.
    trigger = cron_trigger(f"0 9 * * {weekday}")
    nxt = trigger.get_next_fire_time(None, T0 + timedelta(days=1))  # from Saturday noon
    assert nxt is not None
    assert (nxt.day, nxt.hour) == (expected_day, 9)


@pytest.mark.parametrize("bad", ["* * * *", "61 * * * *", "0 9 * * 8", "a b c d e"])
def test_bad_cron_text_is_refused_with_the_text(bad: str) -> None:
    with pytest.raises(ValueError, match="cron"):
        cron_trigger(bad)


def test_an_unknown_time_zone_is_refused() -> None:
    with pytest.raises(ValueError, match="Mars/Base"):
        cron_trigger("0 9 * * *", "Mars/Base")


def test_cron_fields_are_read_in_the_schedules_time_zone() -> None:
    trigger = cron_trigger("0 9 * * *", "Asia/Shanghai")  # 09:00 in Shanghai = 01:00 UTC
    nxt = trigger.get_next_fire_time(None, T0)
    assert nxt is not None
    assert nxt.astimezone(UTC) == datetime(2026, 11, 21, 1, 0, tzinfo=UTC)


def test_intervals_are_aligned_to_the_epoch_so_every_dispatcher_agrees() -> None:
    sched = ScheduleSettings(name="i", task="t", every_s=7)
    a = build_trigger(sched).get_next_fire_time(None, T0)
    b = build_trigger(sched).get_next_fire_time(None, T0)
    assert a == b
    assert a is not None
    assert int(a.timestamp()) % 7 == 0


def test_a_schedule_needs_exactly_one_trigger_and_a_known_queue() -> None:
    with pytest.raises(ValidationError, match="exactly one of cron and every_s"):
        ScheduleSettings(name="x", task="t")
    with pytest.raises(ValidationError, match="exactly one of cron and every_s"):
        ScheduleSettings(name="x", task="t", cron="* * * * *", every_s=5)
    with pytest.raises(ValidationError, match="queue 'bulk'"):
        JobsSettings(schedules=[ScheduleSettings(name="x", task="t", every_s=5, queue="bulk")])
    with pytest.raises(ValidationError, match="repeated: x"):
        JobsSettings(schedules=[ScheduleSettings(name="x", task="t", every_s=5)] * 2)


EVERY_MINUTE = cron_trigger("* * * * *")


def test_on_time_runs_are_run_under_every_policy() -> None:
    for missed in ("coalesce", "all", "skip"):
        due = due_runs(
            EVERY_MINUTE,
            last=T0,
            now=T0 + timedelta(minutes=1, seconds=2),
            missed=missed,
            backfill_max=10,
            grace_s=5,
        )
        assert due.runs == [T0 + timedelta(minutes=1)]
        assert due.missed == 0


def test_nothing_is_due_between_fire_times() -> None:
    due = due_runs(
        EVERY_MINUTE, last=T0, now=T0 + timedelta(seconds=59), missed="all", backfill_max=10, grace_s=5
    )
    assert (due.runs, due.last, due.missed) == ([], T0, 0)


@pytest.mark.parametrize(
    ("missed", "runs"),
    [
        ("coalesce", [T0 + timedelta(minutes=10)]),
        ("all", [T0 + timedelta(minutes=m) for m in range(7, 11)]),
        ("skip", []),
    ],
)
def test_after_downtime_missed_runs_follow_the_policy(missed: str, runs: list[datetime]) -> None:
    now = T0 + timedelta(minutes=10, seconds=30)  # ten fire times passed, none on time
    due = due_runs(EVERY_MINUTE, last=T0, now=now, missed=missed, backfill_max=4, grace_s=5)  # type: ignore[arg-type]
    assert due.runs == runs
    assert due.last == T0 + timedelta(minutes=10)  # caught up, whatever was run
    assert due.missed == 10 - len(runs)


def test_coalesce_folds_missed_runs_into_an_on_time_one() -> None:
    now = T0 + timedelta(minutes=10, seconds=1)
    due = due_runs(EVERY_MINUTE, last=T0, now=now, missed="coalesce", backfill_max=4, grace_s=5)
    assert due.runs == [T0 + timedelta(minutes=10)]
    assert due.missed == 9
