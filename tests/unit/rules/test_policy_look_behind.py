"""shared.policy.look_behind_every_s and its pace while a task is paused (its jobs behind the cursors)."""

from __future__ import annotations

from duecast.shared.policy import (
    LOOK_BEHIND_CHEAP_JOBS,
    LOOK_BEHIND_EVERY_S,
    look_behind_every_s,
    look_behind_paused_every_s,
)


def test_every_claim_while_few_jobs_are_in_runs_then_at_most_every_half_second() -> None:
    assert look_behind_every_s(0) == 0.0
    assert look_behind_every_s(LOOK_BEHIND_CHEAP_JOBS) == 0.0
    assert look_behind_every_s(LOOK_BEHIND_CHEAP_JOBS + 1) == LOOK_BEHIND_EVERY_S


def test_while_a_task_is_paused_a_look_costs_at_most_a_tenth_of_the_time() -> None:
    assert look_behind_paused_every_s(0.0, 0.001) == LOOK_BEHIND_EVERY_S  # cheap: every half second
    assert look_behind_paused_every_s(0.0, 0.2) == 2.0  # 200 ms a look: one every 2 s
    assert look_behind_paused_every_s(3.0, 0.01) == 3.0  # never more often than without the pause
