"""What the topic integration tests share: the settings' groups and TopicsEnv (publisher, admin,
monitor and SQL helpers over one test's topic tables)."""

from __future__ import annotations

import threading
from typing import Any

import pymysql

from duecast.dispatcher.main import serve as serve_dispatcher
from duecast.shared.api.publish import Publisher
from duecast.shared.fanout.client import connect_redis
from duecast.shared.settings import Settings
from duecast.shared.states import State
from duecast.shared.storage.db import Database
from duecast.shared.storage.topic_admin import TopicAdmin
from duecast.shared.storage.topic_status import TopicMonitor
from duecast.worker.main import serve as serve_worker

APP = "tests.integration.topics_app"
CLUSTER = ("billing", "shipping", "audit")


def groups(**overrides: dict[str, Any]) -> list[dict[str, Any]]:
    base: dict[str, dict[str, Any]] = {
        "billing": {"max_retries": 3},
        "shipping": {},
        "audit": {},
        "cache": {"mode": "broadcast"},
    }
    out = [{"topic": "orders", "name": n, "start": "earliest", **f} for n, f in {**base, **overrides}.items()]
    return [*out, {"topic": "ledger", "name": "books", "start": "earliest"}]


class TopicsEnv:
    def __init__(self, settings: Settings, sql: pymysql.cursors.Cursor) -> None:
        self.settings = settings
        self.sql = sql
        self.publisher = Publisher(settings, connect_redis(settings.redis))
        self.admin = TopicAdmin(Database(settings.mysql), settings.topics)
        self.monitor = TopicMonitor(Database(settings.mysql), settings.topics)

    def table(self, kind: str) -> str:
        return f"`{self.settings.topics.table(kind)}`"

    def run_once(self) -> None:
        """One dispatch and one worker drain: every due delivery runs (at most) once."""
        serve_dispatcher(self.settings, threading.Event(), drain=True)
        serve_worker(self.settings, threading.Event(), drain=True)

    def query(self, stmt: str, args: Any = None) -> list[tuple[Any, ...]]:
        self.sql.execute(
            stmt.format(**{k: self.table(k) for k in ("messages", "deliveries", "groups")}), args
        )
        return list(self.sql.fetchall())

    def deliveries(self, group: str) -> dict[int, tuple[int, int, int]]:
        """message id -> (state, errors, attempt) of `group`'s deliveries."""
        rows = self.query(
            "SELECT d.seq, d.dc_state, d.errors, d.dc_attempt FROM {deliveries} d "
            "JOIN {groups} g ON g.id = d.group_id WHERE g.name = %s",
            (group,),
        )
        return {int(s): (int(st), int(e), int(a)) for s, st, e, a in rows}

    def make_due(self) -> None:
        """Time passes: every pending delivery is due now."""
        self.query("UPDATE {deliveries} SET run_at = NOW(6) WHERE dc_state = %s", (int(State.IDLE),))
