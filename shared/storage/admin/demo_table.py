"""The demo's business table: `user_block_status`, created and filled with N users if needed.

Runs shared.queries.demo; `duecast demo` (cli/demo/) and the benchmarks call it.
"""

from __future__ import annotations

from collections.abc import Callable

from ...queries import demo as sql
from ...queries.demo import CHUNK, TABLE
from ...queries.ranges import ranges_table
from ...settings import MySQLSettings, SourceSettings
from ..db import connect
from ..units import Cursor

__all__ = ["TABLE", "due_per_second", "ensure_database", "make_all_due", "prepare", "source"]


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
            cur.execute(sql.create_database(mysql.database))
        conn.commit()
    finally:
        conn.close()


def prepare(mysql: MySQLSettings, users: int, period_s: float, progress: Callable[[int], None]) -> bool:
    """Make the table hold exactly `users` users, each last checked at its slot in the period.

    Returns True when it was (re)built, False when an existing table already fit.
    """
    ensure_database(mysql)
    conn = connect(mysql)
    try:
        with conn.cursor() as cur:
            if _row_count(cur) == users:
                return False
            cur.execute(sql.DROP_TABLE)
            cur.execute(sql.CREATE_TABLE)
            fill = sql.fill_chunk(round(period_s * 1_000_000))
            for start in range(0, users, CHUNK):
                n = min(CHUNK, users - start)
                cur.execute(fill, (start + 1, start + 1, n))
                conn.commit()
                progress(n)
        return True
    finally:
        conn.close()


def make_all_due(mysql: MySQLSettings, src: SourceSettings) -> None:
    """Every user due at once: the business rows in row mode, the ranges in range mode."""
    table, column = (ranges_table(src), "checked_at") if src.mode == "ranges" else (TABLE, src.due_column)
    conn = connect(mysql)
    try:
        with conn.cursor() as cur:
            cur.execute(sql.all_due(table, column))
        conn.commit()
    finally:
        conn.close()


def due_per_second(mysql: MySQLSettings, src: SourceSettings) -> list[int]:
    """Users due in each second of the period (queries.demo.due_per_second), every second listed."""
    period_us = round(src.period_s * 1_000_000)
    if src.mode == "ranges":
        stmt = sql.due_per_second(ranges_table(src), "checked_at", "`rows_seen`", period_us)
    else:
        stmt = sql.due_per_second(TABLE, src.due_column, "1", period_us)
    conn = connect(mysql)
    try:
        with conn.cursor() as cur:
            cur.execute(stmt)
            counts = {int(second): int(n) for second, n in cur.fetchall()}
    finally:
        conn.close()
    return [counts.get(second, 0) for second in range(max(1, round(src.period_s)))]


def _row_count(cur: Cursor) -> int | None:
    cur.execute(sql.TABLE_EXISTS, (TABLE,))
    row = cur.fetchone()
    if not row or not row[0]:
        return None
    cur.execute(sql.COUNT_ROWS)
    row = cur.fetchone()
    return int(row[0]) if row else 0
