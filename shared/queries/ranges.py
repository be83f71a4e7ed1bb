"""Range mode's naming and schema: the companion table that holds dispatch state per id span.

A source in mode "ranges" is dispatched through its ranges table with the ordinary row machinery
(claim, committed start with leases, fenced ack, requeue); this module only derives that table's
settings and DDL, and the statements range mode runs on the business table and its ranges (RangeSQL).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..identifiers import quote
from ..settings import SourceSettings
from ..states import ATTEMPT_COLUMN, DISPATCHED_AT_COLUMN, DUE_INDEX, STATE_COLUMN, State
from .pace import slot_sql
from .source import delete_by_key

IDLE, RUNNING = int(State.IDLE), int(State.RUNNING)

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


@dataclass(frozen=True)
class RangeSQL:
    """Range mode: statements on the business table (the ranges table uses SourceSQL)."""

    rows_in_ranges: str
    rows_in_ranges_packed: str
    ack_checked: str
    set_values: str
    delete_ids: str
    discover: str
    known_max: str
    freshness: str


def render_ranges(src: SourceSettings, ranges_table: str) -> RangeSQL:
    t, pk, due, r = quote(src.table), quote(src.id_column), quote(src.due_column), quote(ranges_table)
    st = quote(STATE_COLUMN)
    size = int(src.range_size)
    period_us = round(src.period_s * 1_000_000)
    return RangeSQL(
        # A batch's rows: `{spans}` is `(id >= lo AND id < hi) OR ...` from started range rows;
        # PRIMARY range scans, a plain read: no locks (the span's RUNNING state fences its rows).
        rows_in_ranges=f"SELECT {{columns}} FROM {t} FORCE INDEX (PRIMARY) WHERE {{spans}} ORDER BY {pk}",
        # The same rows as one JSON array of arrays (`{columns}` quoted, comma-separated): one
        # value to parse with json.loads instead of a protocol packet per row, which is most of a
        # worker's time per check. Only for columns whose JSON form is their PyMySQL value (see
        # RangeStore); MySQL's JSON_ARRAYAGG has no ORDER BY, so the caller sorts. The count tells
        # a whole value from one a server limit cut short.
        rows_in_ranges_packed=(
            f"SELECT COUNT(*), JSON_ARRAYAGG(JSON_ARRAY({{columns}})) "
            f"FROM {t} FORCE INDEX (PRIMARY) WHERE {{spans}}"
        ),
        # A range's ack (in place of the row machinery's ack_touch): a fixed rate at an even pace.
        # checked_at becomes the slot the check served: the latest time at or before NOW(6) at the
        # span's phase (shared.queries.pace, pace.slot_us), so the span is due a period after
        # the slot it was due at. A check made d late does not make every later check d later
        # (1M users every 10 s is 100,000 checks/s, not 1M / (10 s + d)); spans' phases spread
        # evenly over the period, so a table that starts all due (or all fresh) is checked at
        # rows/period per second from its second period on, not in a burst a period; and a span
        # checked long after its slot (an outage) is due at its next slot, not again at once.
        # So checked_at is never later than the check and less than a period earlier: staleness
        # read from it errs on the old side. PRIMARY, fenced on RUNNING.
        ack_checked=(
            f"UPDATE {r} FORCE INDEX (PRIMARY) SET {st} = {IDLE}, `checked_at` = "
            f"{slot_sql('`range_id`', period_us)} + INTERVAL %s MICROSECOND{{set}} "
            f"WHERE {{fence}} AND {st} = {RUNNING}"
        ),
        # Only rows whose handler asked for a change are written (their due column records the
        # change, as a touch does in row mode); PRIMARY lookups. `{set}` starts with ", ".
        set_values=f"UPDATE {t} FORCE INDEX (PRIMARY) SET {due} = NOW(6){{set}} WHERE {{ids}}",
        delete_ids=delete_by_key(t, "{ids}", pk),
        # Range discovery: one range per span of ids that holds a row, from `%s` up. New ranges
        # start long ago, so they are due at once. A PRIMARY range scan, then a PRIMARY lookup per
        # span in the ranges table. Only spans with no range yet are inserted: INSERT IGNORE of a
        # key that exists takes a shared lock on that range row for its duplicate check, so a full
        # pass would wait on every range a worker holds locked and die of a lock wait timeout (it
        # killed the dispatcher at start-up, issue 12). Under READ COMMITTED both reads are
        # consistent reads that lock nothing; a range another session is inserting right now
        # (a second dispatcher's pass) still makes the insert wait, until that session commits.
        # INSERT IGNORE keeps that case idempotent and harmless.
        discover=(
            f"INSERT IGNORE INTO {r} (`range_id`, `lo`, `hi`, `checked_at`) "
            f"SELECT s.range_id, s.lo, s.lo + {size}, '{NEVER_CHECKED}' FROM ("
            f"SELECT DISTINCT {pk} DIV {size} + 1 AS range_id, ({pk} DIV {size}) * {size} AS lo "
            f"FROM {t} WHERE {pk} >= %s) AS s "
            f"WHERE NOT EXISTS (SELECT 1 FROM {r} AS known WHERE known.`range_id` = s.range_id)"
        ),
        known_max=f"SELECT MAX(`lo`) FROM {r}",
        # Freshness: rows (as last seen) whose range was checked within period + slack, of all.
        freshness=(
            f"SELECT COALESCE(SUM(`rows_seen`), 0), COALESCE(SUM(IF(`checked_at` >= "
            f"NOW(6) - INTERVAL %s MICROSECOND, `rows_seen`, 0)), 0) FROM {r}"
        ),
    )
