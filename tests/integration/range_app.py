"""Handler app for the range-mode tests: one re-scan source whose handler is steered per user id."""

from __future__ import annotations

import threading
from collections import Counter

from duecast import Ack, Registry, Row

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


PLAN = Plan()


@handlers.row(SOURCE, columns=["status"])
def check(row: Row) -> Ack | None:
    user = int(row["user_id"])
    with PLAN.lock:
        PLAN.runs[user] += 1
        PLAN.attempts.setdefault(user, []).append(int(row["dc_attempt"]))
        if user in PLAN.fail:
            raise RuntimeError(f"check of {user} failed")
        status = PLAN.set_status.get(user)
    return None if status is None else Ack.touch(status=status)
