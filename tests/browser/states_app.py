"""Handlers for the dashboard's three states: a range-mode source in its first pass (slow checks), a
source whose downstream service refuses every call, and a healthy one."""

from __future__ import annotations

import time

from duecast import Ack, Registry, Row

handlers = Registry()
FIRST_PASS, FAILING, HEALTHY = "new_users", "payments", "users"
CHECK_S = 0.004  # per user of the first pass: 6,000 users take ~25 s, long enough to be seen
CALL_S = 0.0005  # per failing call: a pass of 3,000 users spreads its failures over most of its 2 s period


@handlers.row(FIRST_PASS, columns=["status"])
def check_new_user(row: Row) -> Ack | None:
    time.sleep(CHECK_S)
    return None


@handlers.row(FAILING, columns=["status"])
def charge(row: Row) -> Ack | None:
    time.sleep(CALL_S)
    raise ConnectionError(f"payments.internal:443 refused the connection (user {row['user_id']})")


@handlers.row(HEALTHY, columns=["status"])
def check_user(row: Row) -> Ack | None:
    return None
