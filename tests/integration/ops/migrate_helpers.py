"""Helpers the migrate tests share: the dispatch columns expected and information_schema reads."""

from __future__ import annotations

import pymysql

DISPATCH_COLUMNS = {
    # name: (COLUMN_TYPE, IS_NULLABLE, COLUMN_DEFAULT)
    "dc_state": ("tinyint(3) unsigned", "NO", "0"),
    "dc_attempt": ("int(10) unsigned", "NO", "0"),
    "dc_dispatched_at": ("datetime(6)", "YES", "NULL"),
}


def columns(sql: pymysql.cursors.Cursor, table: str) -> dict[str, tuple[str, str, str | None]]:
    sql.execute(
        "SELECT COLUMN_NAME, COLUMN_TYPE, IS_NULLABLE, COLUMN_DEFAULT FROM information_schema.COLUMNS "
        "WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = %s ORDER BY ORDINAL_POSITION",
        (table,),
    )
    return {name: (kind, nullable, default) for name, kind, nullable, default in sql.fetchall()}


def index_columns(sql: pymysql.cursors.Cursor, table: str, index: str = "dc_due") -> list[str]:
    sql.execute(
        "SELECT COLUMN_NAME FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = DATABASE() "
        "AND TABLE_NAME = %s AND INDEX_NAME = %s ORDER BY SEQ_IN_INDEX",
        (table, index),
    )
    return [r[0] for r in sql.fetchall()]


def business_checksum(sql: pymysql.cursors.Cursor, table: str) -> tuple[int, int]:
    """Row count and an order-independent checksum over the business columns only."""
    sql.execute(
        f"SELECT COUNT(*), COALESCE(SUM(CRC32(CONCAT_WS('|', user_id, status, updated_time))), 0) "
        f"FROM `{table}`"
    )
    count, crc = sql.fetchone()  # type: ignore[misc]
    return int(count), int(crc)
