"""Handler app for the range-mode tests: one re-scan source whose handler is steered per user id."""

from __future__ import annotations

import threading
import time
import uuid
from collections import Counter
from typing import Any

import pymysql.cursors

from duecast import Ack, Registry, Row
from duecast.shared.settings import SourceSettings

handlers = Registry()
SOURCE = "ranged"


class Plan:
    """What the handler does per id: raise, or set a status; every execution is counted."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.reset()

    def reset(self) -> None:
        with self.lock:
            self.runs: Counter[int] = Counter()
            self.attempts: dict[int, list[int]] = {}
            self.fail: set[int] = set()
            self.set_status: dict[int, int] = {}
            self.delete: set[int] = set()  # users whose check deletes their row (Ack.delete)
            self.times: list[float] = []  # time.monotonic() of every check, for per-second series


PLAN = Plan()


def users_source(
    sql: pymysql.cursors.Cursor, users: int, prefix: str = "ubs", **overrides: Any
) -> SourceSettings:
    """A fresh user_block_status-like table of users 1..users (all long due) and a range-mode
    source over it (spans of 100 ids, period 10 s). The caller drops the table."""
    table = f"{prefix}_{uuid.uuid4().hex[:8]}"
    sql.execute(
        f"CREATE TABLE `{table}` (user_id BIGINT PRIMARY KEY, status INT NOT NULL DEFAULT 1, "
        "updated_time DATETIME(6) NOT NULL)"
    )
    sql.execute(f"INSERT INTO `{table}` SELECT seq, 1, '2020-01-01' FROM seq_1_to_{users}")
    fields: dict[str, Any] = {
        "name": SOURCE,
        "table": table,
        "id_column": "user_id",
        "due_column": "updated_time",
        "period_s": 10,
        "mode": "ranges",
        "range_size": 100,
        **overrides,
    }
    return SourceSettings(**fields)


@handlers.row(SOURCE, columns=["status"])
def check(row: Row) -> Ack | None:
    user = int(row["user_id"])
    with PLAN.lock:
        PLAN.runs[user] += 1
        PLAN.times.append(time.monotonic())
        PLAN.attempts.setdefault(user, []).append(int(row["dc_attempt"]))
        if user in PLAN.fail:
            raise RuntimeError(f"check of {user} failed")
        if user in PLAN.delete:
            return Ack.delete()
        status = PLAN.set_status.get(user)
    return None if status is None else Ack.touch(status=status)
