"""Example handlers for the motivating re-scan: re-check every user of user_block_status.

The "check" is a stand-in for a real lookup (is this user showing a banned page?): a cheap,
deterministic hash of the user and the attempt. Status: 1 = ok, 2 = blocked.
"""

from __future__ import annotations

from duecast import Ack, Registry, Row

handlers = Registry()

OK, BLOCKED = 1, 2


def looks_blocked(user_id: int, attempt: int) -> bool:
    """About one check in a thousand finds a violation; the next check usually clears it."""
    return (user_id * 2654435761 + attempt * 40503) % 1000 == 0


@handlers.batch("user_block_status", columns=["status"])
def check_users(rows: list[Row]) -> list[Ack]:
    """Batch form: one call per slice of rows. Only rows whose status changes set a column, so the
    worker acks the whole slice with one UPDATE per distinct outcome."""
    acks = []
    for row in rows:
        status = BLOCKED if looks_blocked(row["user_id"], row["dc_attempt"]) else OK
        acks.append(Ack.default() if status == row["status"] else Ack.touch(status=status))
    return acks
