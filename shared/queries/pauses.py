"""The SQL of duecast_pauses: what an operator paused (a source, a job queue, a consumer group).

One row per paused thing, keyed by what the operator named (kind, name); `source` is the dispatch
source it stops (what dispatchers claim for and workers pop from). Values are parameters.
"""

from __future__ import annotations

from ..identifiers import quote

PAUSES_TABLE = "duecast_pauses"
_T = quote(PAUSES_TABLE)

PAUSES_DDL = f"""CREATE TABLE IF NOT EXISTS {_T} (
  `kind` VARCHAR(16) NOT NULL,
  `name` VARCHAR(191) NOT NULL,
  `source` VARCHAR(191) NOT NULL,
  `paused_at` DATETIME(6) NOT NULL,
  PRIMARY KEY (`kind`, `name`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin"""

# Every role reads the whole table (a few rows) at most every PAUSE_REFRESH_S; a plain read.
LIST = f"SELECT `kind`, `name`, `source`, `paused_at` FROM {_T} ORDER BY `kind`, `name`"
# Pausing twice keeps the first time; PRIMARY.
PAUSE = f"INSERT IGNORE INTO {_T} (`kind`, `name`, `source`, `paused_at`) VALUES (%s, %s, %s, NOW(6))"
RESUME = f"DELETE FROM {_T} WHERE `kind` = %s AND `name` = %s"
