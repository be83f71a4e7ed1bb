"""The example app's handler: re-check every user of user_block_status (`--app handlers`)."""

from __future__ import annotations

from duecast import Ack, Registry, Row

handlers = Registry()

OK, BLOCKED = 1, 2


def is_blocked(user_id: int, attempt: int) -> bool:
    """A stand-in for the real check (is this user's page blocked?): about one user in fifty."""
    return (user_id * 7919 + attempt) % 50 == 0


@handlers.row("user_block_status", columns=["status"])
def check_user(row: Row) -> Ack | None:
    status = BLOCKED if is_blocked(row["user_id"], row["dc_attempt"]) else OK
    # None: the source's default (touch: updated_time = NOW(6)); set a column only when it changes.
    return None if status == row["status"] else Ack.touch(status=status)
