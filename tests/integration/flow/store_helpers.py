"""Helpers the SourceStore tests share: entries for ids, due times, and who waits on a row lock."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable

from duecast.shared.fanout.keys import Entry
from tests.integration.conftest import Env

MakeEnv = Callable[..., Env]
IDLE, DISPATCHED = 0, 1


def entries(ids: list[int], attempt: int = 1) -> list[Entry]:
    return [Entry(i, attempt) for i in ids]


def due_times(env: Env) -> dict[int, dt.datetime]:
    return dict(env.query(f"SELECT {{pk}}, `{env.source.due_column}` FROM {{t}}"))


def in_locking_read(env: Env, connection_id: int) -> bool:
    """Whether that session is executing a locking read of the test table: with its rows held
    elsewhere, it is blocked on their lock. (PROCESSLIST, not INNODB_TRX: a one-id PRIMARY lookup waits
    in the optimizer's const-row read before INNODB_TRX lists a LOCK WAIT, and that table is a cache
    that polls faster than 100 ms keep from refreshing.)"""
    rows = env.query(
        "SELECT INFO FROM information_schema.PROCESSLIST WHERE ID = %s AND COMMAND = 'Query'",
        (connection_id,),
    )
    return any(f"`{env.table}`" in str(info) and "FOR UPDATE" in str(info) for (info,) in rows)
