"""The SQL of duecast's own bookkeeping tables: the leader's lease row (leader election) and the worker
registry (one row per live worker process). Table names come from validated settings; values are
parameters; times are NOW(6) on the server.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..identifiers import quote


@dataclass(frozen=True)
class LeaderSQL:
    """A named lease (leader election) in duecast's leases table: one row per name."""

    acquire: str
    holder: str
    resign: str


def render_leases(table: str) -> LeaderSQL:
    t = quote(table)
    return LeaderSQL(
        # Take the lease if it is free or expired, renew it if it is ours; otherwise change
        # nothing. ON DUPLICATE KEY UPDATE assigns left to right, so the second IF already sees
        # the new holder. PRIMARY; one row lock, held for this statement's transaction only.
        acquire=(
            f"INSERT INTO {t} (`name`, `holder`, `expires_at`) "
            "VALUES (%s, %s, NOW(6) + INTERVAL %s MICROSECOND) ON DUPLICATE KEY UPDATE "
            "`holder` = IF(`expires_at` < NOW(6) OR `holder` = VALUES(`holder`), "
            "VALUES(`holder`), `holder`), "
            "`expires_at` = IF(`holder` = VALUES(`holder`), VALUES(`expires_at`), `expires_at`)"
        ),
        # Who holds it now, and for how many more microseconds (by the database's clock).
        holder=(
            f"SELECT `holder`, TIMESTAMPDIFF(MICROSECOND, NOW(6), `expires_at`) FROM {t} WHERE `name` = %s"
        ),
        # A leader that stops hands over at once instead of letting the lease run out.
        resign=f"UPDATE {t} SET `expires_at` = NOW(6) WHERE `name` = %s AND `holder` = %s",
    )


@dataclass(frozen=True)
class WorkerSQL:
    """The worker registry: one row per live worker process, beating."""

    register: str
    beat: str
    deregister: str
    lock_skip: str
    named: str
    dead: str
    alive: str


def render_workers(table: str) -> WorkerSQL:
    t = quote(table)
    return WorkerSQL(
        register=(
            f"INSERT INTO {t} (`name`, `host`, `pid`, `sources`, `tasks`, `started_at`, `heartbeat_at`) "
            "VALUES (%s, %s, %s, %s, %s, NOW(6), NOW(6)) ON DUPLICATE KEY UPDATE `heartbeat_at` = NOW(6)"
        ),
        beat=f"UPDATE {t} SET `heartbeat_at` = NOW(6) WHERE `name` = %s",
        deregister=f"DELETE FROM {t} WHERE `name` = %s",
        # Redelivery forgets a dead worker only if no session holds its row (a stopped one's open
        # transaction may): it never waits, and tries again at its next look.
        lock_skip=f"SELECT `name` FROM {t} WHERE `name` = %s FOR UPDATE SKIP LOCKED",
        named=f"SELECT `name` FROM {t} WHERE `name` = %s",  # a plain read: waits for no lock
        # Silent longer than dead_after (µs), by the database's clock. PRIMARY scan: the table
        # holds one row per live worker.
        dead=f"SELECT `name` FROM {t} WHERE `heartbeat_at` < NOW(6) - INTERVAL %s MICROSECOND",
        alive=(
            "SELECT `name`, `host`, `pid`, `sources`, `tasks`, `started_at`, "
            f"TIMESTAMPDIFF(MICROSECOND, `heartbeat_at`, NOW(6)) FROM {t} "
            "WHERE `heartbeat_at` >= NOW(6) - INTERVAL %s MICROSECOND ORDER BY `name`"
        ),
    )
