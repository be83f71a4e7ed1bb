"""Packed reads: a batch's rows fetched as one JSON_ARRAYAGG value and parsed by json.loads.

PyMySQL parses every row packet in Python, which was most of a worker's time per row; one packed
value costs a fraction of that. Only for columns JSON carries unchanged: integers and text.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from operator import itemgetter
from typing import Any

from .units import Cursor

log = logging.getLogger("duecast.packed")

# information_schema DATA_TYPEs whose values come back from JSON as PyMySQL would return them.
# Dates, decimals, floats and binary strings change type. TEXT types are left out too: MariaDB
# reports a JSON column as longtext, and JSON_ARRAY embeds such a column as JSON, not as a string.
PACKABLE_TYPES = frozenset({"tinyint", "smallint", "mediumint", "int", "bigint", "char", "varchar"})


def read_packed(
    cur: Cursor, stmt: str, args: Sequence[Any] | None = None, *, what: str
) -> list[list[Any]] | None:
    """Run `SELECT COUNT(*), JSON_ARRAYAGG(JSON_ARRAY(id, ...)) ...`: the rows as value lists
    sorted by their first value (MySQL's JSON_ARRAYAGG takes no ORDER BY), or None when the value
    cannot be trusted (a server limit cut it short), so the caller reads row by row instead."""
    cur.execute(stmt, args)
    count, packed = cur.fetchone() or (0, None)
    if not count:
        return []
    try:
        values: list[list[Any]] = json.loads(packed) if packed is not None else []
    except ValueError:
        values = []
    if len(values) != count:
        log.warning(
            "packed read of %s gave %d of %d rows (max_allowed_packet or group_concat_max_len too "
            "small?); reading row by row",
            what,
            len(values),
            count,
        )
        return None
    values.sort(key=itemgetter(0))
    return values
