"""Helpers the SourceStore tests share: entries for ids, due times and the slots a check records,
and the states' values."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable

from duecast.shared.entries import Entry
from duecast.shared.pace import slot_us, spread_phase_us
from tests.integration.conftest import Env

MakeEnv = Callable[..., Env]
IDLE, DISPATCHED, RUNNING = 0, 1, 2


def server_us(t: dt.datetime) -> int:
    """A DATETIME as shared.queries.pace.NOW_US counts it: microseconds since year 0 (TO_SECONDS)."""
    seconds = (t.toordinal() + 365) * 86_400 + t.hour * 3600 + t.minute * 60 + t.second
    return seconds * 1_000_000 + t.microsecond


def at_slot(due: dt.datetime, t0: dt.datetime, t1: dt.datetime, key: int, period_s: float) -> bool:
    """Whether `due` is the slot a check of `key` made between t0 and t1 records (pace.slot_us):
    at the key's phase, the latest such time at or before the check."""
    period_us = round(period_s * 1_000_000)
    us = server_us(due)
    at_phase = (us - spread_phase_us(key, period_us)) % period_us == 0
    return at_phase and slot_us(server_us(t0), key, period_us) <= us <= slot_us(server_us(t1), key, period_us)


def entries(ids: list[int], attempt: int = 1) -> list[Entry]:
    return [Entry(i, attempt) for i in ids]


def due_times(env: Env) -> dict[int, dt.datetime]:
    return dict(env.query(f"SELECT {{pk}}, `{env.source.due_column}` FROM {{t}}"))
