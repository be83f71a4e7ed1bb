"""Range mode's naming and schema: the companion table that holds dispatch state per id span.

A source in mode "ranges" is dispatched through its ranges table with the ordinary row machinery
(claim, committed start with leases, fenced ack, requeue); this module only derives that table's
settings and DDL.
"""

from __future__ import annotations

import math

from ..identifiers import quote
from ..settings import SourceSettings
from ..states import ATTEMPT_COLUMN, DISPATCHED_AT_COLUMN, DUE_INDEX, STATE_COLUMN

RANGE_PREFIX = "dc_ranges_"
# A discovered range's checked_at until its first check: due at once, and older than any real check,
# so freshness can tell "never checked" (the first pass has not reached it) from "checked long ago".
NEVER_CHECKED = "2000-01-01 00:00:00"


def ranges_table(src: SourceSettings) -> str:
    """`dc_ranges_<source name>`: at most 10 + 48 characters, within MySQL's 64."""
    return RANGE_PREFIX + src.name


def range_source(src: SourceSettings) -> SourceSettings:
    """The ranges table as a row-mode source: one row per span, due when checked_at is old.

    A span's key is `id DIV range_size + 1`: entries need positive ids, and span 0 exists.
    Batch sizes are given in rows and converted to ranges here.
    """
    per = src.range_size
    return src.model_copy(
        update={
            "table": ranges_table(src),
            "id_column": "range_id",
            "due_column": "checked_at",
            "mode": "rows",
            "claim_batch": max(1, math.ceil(src.claim_batch / per)),
            "high_water": max(1, math.ceil(src.high_water / per)),
        }
    )


def ranges_table_ddl(src: SourceSettings) -> str:
    return f"""CREATE TABLE IF NOT EXISTS {quote(ranges_table(src))} (
  `range_id` BIGINT NOT NULL,
  `lo` BIGINT NOT NULL,
  `hi` BIGINT NOT NULL,
  `checked_at` DATETIME(6) NOT NULL,
  `rows_seen` INT UNSIGNED NOT NULL DEFAULT 0,
  `{STATE_COLUMN}` TINYINT UNSIGNED NOT NULL DEFAULT 0,
  `{ATTEMPT_COLUMN}` INT UNSIGNED NOT NULL DEFAULT 0,
  `{DISPATCHED_AT_COLUMN}` DATETIME(6) NULL,
  PRIMARY KEY (`range_id`),
  KEY `{DUE_INDEX}` (`{STATE_COLUMN}`, `checked_at`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4"""
