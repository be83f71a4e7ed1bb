"""The demo's business table: `user_block_status`, created and filled with N users if needed.

Rows are generated in SQL (a cross join of digits) in chunks, so 1,000,000 users take seconds.
"""

from __future__ import annotations

from collections.abc import Callable

from ...shared.identifiers import quote
from ...shared.settings import MySQLSettings, SourceSettings
from ...shared.storage.db import connect
from ...shared.storage.units import Cursor

TABLE = "user_block_status"
CHUNK = 100_000  # rows per INSERT ... SELECT: 10^5 = five digit tables joined
_DIGITS = "(SELECT 0 n UNION ALL " + " UNION ALL ".join(f"SELECT {i}" for i in range(1, 10)) + ")"
_SEQ = (
    f"SELECT d0.n + 10*d1.n + 100*d2.n + 1000*d3.n + 10000*d4.n AS n FROM {_DIGITS} d0, "
    f"{_DIGITS} d1, {_DIGITS} d2, {_DIGITS} d3, {_DIGITS} d4"
)


def source(period_s: float = 10.0, batch: int = 2000, mode: str = "rows") -> SourceSettings:
    return SourceSettings(
        mode=mode,
        name=TABLE,
        table=TABLE,
        id_column="user_id",
        due_column="updated_time",
        period_s=period_s,
        claim_batch=batch,
        high_water=max(40_000, batch * 20),
    )


def ensure_database(mysql: MySQLSettings) -> None:
    conn = connect(mysql, database=False)
    try:
        with conn.cursor() as cur:
            cur.execute(f"CREATE DATABASE IF NOT EXISTS {quote(mysql.database)} CHARACTER SET utf8mb4")
        conn.commit()
    finally:
        conn.close()


def prepare(mysql: MySQLSettings, users: int, period_s: float, progress: Callable[[int], None]) -> bool:
    """Make the table hold exactly `users` users, last checked spread over one period.

    Returns True when it was (re)built, False when an existing table already fit.
    """
    ensure_database(mysql)
    conn = connect(mysql)
    try:
        with conn.cursor() as cur:
            if _row_count(cur) == users:
                return False
            cur.execute(f"DROP TABLE IF EXISTS {TABLE}")
            cur.execute(
                f"CREATE TABLE {TABLE} (user_id BIGINT NOT NULL PRIMARY KEY, status INT NOT NULL "
                "DEFAULT 1, updated_time DATETIME(6) NOT NULL) ENGINE=InnoDB"
            )
            spread_us = round(period_s * 1_000_000)
            for start in range(0, users, CHUNK):
                n = min(CHUNK, users - start)
                # Last checks spread evenly over one period, so the demo starts in steady state.
                cur.execute(
                    f"INSERT INTO {TABLE} (user_id, status, updated_time) "
                    f"SELECT %s + n, 1, NOW(6) - INTERVAL ((%s + n) * %s DIV %s) MICROSECOND "
                    f"FROM ({_SEQ}) seq WHERE n < %s",
                    (start + 1, start, spread_us, max(users, 1), n),
                )
                conn.commit()
                progress(n)
        return True
    finally:
        conn.close()


def _row_count(cur: Cursor) -> int | None:
    cur.execute(
        "SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = %s",
        (TABLE,),
    )
    row = cur.fetchone()
    if not row or not row[0]:
        return None
    cur.execute(f"SELECT COUNT(*) FROM {TABLE}")
    row = cur.fetchone()
    return int(row[0]) if row else 0
