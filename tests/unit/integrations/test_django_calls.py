"""integrations/django/calls.py: how a Django task travels as a duecast job (pure functions)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from types import SimpleNamespace

from duecast.integrations.django.calls import aware, duecast_priority, exception_path, payload, status_of


def test_priorities_map_in_order_onto_duecasts_ten() -> None:
    mapped = [duecast_priority(p) for p in range(100, -101, -1)]
    assert mapped[0] == 0  # Django's highest runs first
    assert mapped[-1] == 9
    assert duecast_priority(0) == 4
    assert mapped == sorted(mapped)  # never inverts two priorities
    assert set(mapped) == set(range(10))
    assert duecast_priority(10**6) == 0
    assert duecast_priority(-(10**6)) == 9


def test_the_payload_names_the_task_and_its_arguments() -> None:
    assert payload("shop.tasks.send", (1, "a"), {"k": [2]}) == {
        "task": "shop.tasks.send",
        "args": [1, "a"],
        "kwargs": {"k": [2]},
    }


def test_states_read_as_djangos_statuses() -> None:
    statuses = SimpleNamespace(READY="R", SUCCESSFUL="S", FAILED="F")
    assert [status_of(s, statuses) for s in ("pending", "done", "dead", "cancelled")] == ["R", "S", "F", "F"]


def test_the_exception_a_traceback_ends_with() -> None:
    tb = (
        'Traceback (most recent call last):\n  File "x.py", line 1, in f\n    raise ValueError("a: b")\n'
        "ValueError: a: b\n"
    )
    assert exception_path(tb) == "builtins.ValueError"
    assert exception_path("shop.errors.Declined: card\n") == "shop.errors.Declined"
    assert exception_path("discarded by its task: no such order") == "builtins.Exception"
    assert exception_path("") == "builtins.Exception"


def test_naive_database_times_are_taken_as_utc() -> None:
    assert aware(datetime(2026, 1, 1, 12)) == datetime(2026, 1, 1, 12, tzinfo=UTC)
    already = datetime(2026, 1, 1, 12, tzinfo=timezone(timedelta(hours=2)))
    assert aware(already) is already
    assert aware(None) is None
