"""Helpers the SourceStore tests share: entries for ids, due times, and the states' values."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable

from duecast.shared.entries import Entry
from tests.integration.conftest import Env

MakeEnv = Callable[..., Env]
IDLE, DISPATCHED, RUNNING = 0, 1, 2


def entries(ids: list[int], attempt: int = 1) -> list[Entry]:
    return [Entry(i, attempt) for i in ids]


def due_times(env: Env) -> dict[int, dt.datetime]:
    return dict(env.query(f"SELECT {{pk}}, `{env.source.due_column}` FROM {{t}}"))
