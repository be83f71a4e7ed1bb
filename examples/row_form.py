"""The same check written as a per-row handler (simplest form; the batch form is faster)."""

from __future__ import annotations

from duecast import Ack, Registry, Row
from duecast.examples.block_check import BLOCKED, OK, looks_blocked

handlers = Registry()


@handlers.row("user_block_status", columns=["status"])
def check_user(row: Row) -> Ack | None:
    status = BLOCKED if looks_blocked(row["user_id"], row["dc_attempt"]) else OK
    return None if status == row["status"] else Ack.touch(status=status)
