"""PauseStore against real MariaDB: roles see a pause within PAUSE_REFRESH_S, and no sooner than
their cached answer allows (one small read per role every 0.5 s, not one per claim)."""

from __future__ import annotations

from collections.abc import Callable

import pymysql
import pytest

from duecast.shared.queries.pauses import PAUSES_TABLE
from duecast.shared.settings import Settings
from duecast.shared.storage.db import Database
from duecast.shared.storage.pause_store import PAUSE_REFRESH_S, PauseStore

pytestmark = pytest.mark.integration


def test_a_role_sees_a_pause_and_a_resume_within_the_refresh(
    settings_for: Callable[..., Settings], sql: pymysql.cursors.Cursor
) -> None:
    settings = settings_for("pause_store_t", "rescan")  # the pauses table exists
    operator, role = PauseStore(Database(settings.mysql)), PauseStore(Database(settings.mysql))
    try:
        assert role.paused_sources(now=100.0) == frozenset()
        assert operator.pause("source", "pause_store_src", "pause_store_src")
        assert role.paused_sources(now=100.0 + PAUSE_REFRESH_S / 2) == frozenset()  # cached
        assert role.paused_sources(now=100.0 + PAUSE_REFRESH_S) == {"pause_store_src"}
        assert operator.resume("source", "pause_store_src")
        assert not operator.resume("source", "pause_store_src")
        assert role.paused_sources(now=100.0 + 2 * PAUSE_REFRESH_S) == frozenset()
    finally:
        sql.execute(f"DELETE FROM `{PAUSES_TABLE}` WHERE `source` = 'pause_store_src'")
        operator.close()
        role.close()


def test_a_task_pause_stops_no_source_and_is_read_with_the_sources(
    settings_for: Callable[..., Settings], sql: pymysql.cursors.Cursor
) -> None:
    settings = settings_for("pause_store_t", "rescan")
    operator, role = PauseStore(Database(settings.mysql)), PauseStore(Database(settings.mysql))
    try:
        assert operator.pause("task", "pause_store_task", "")
        assert role.paused_sources(now=100.0) == frozenset()  # a task is not a dispatch source
        assert role.paused_tasks() == {"pause_store_task"}  # read by that same query, no other
        assert operator.resume("task", "pause_store_task")
        assert role.paused_tasks() == {"pause_store_task"}  # no I/O: the last read's answer
        role.paused_sources(now=100.0 + PAUSE_REFRESH_S)
        assert role.paused_tasks() == frozenset()
    finally:
        sql.execute(f"DELETE FROM `{PAUSES_TABLE}` WHERE `kind` = 'task' AND `name` = 'pause_store_task'")
        operator.close()
        role.close()
