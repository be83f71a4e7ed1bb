"""The one state vocabulary of a dispatchable row, used in SQL, code, logs and stats.

The numeric values are stored in each source's `dc_state` column; never renumber them.
"""

from enum import IntEnum


class State(IntEnum):
    IDLE = 0  # waiting to become due (a re-scan row between checks, or a pending job)
    DISPATCHED = 1  # claimed by a dispatcher with a new attempt; its entry is in Redis or on its way


# Column names duecast adds to every source table. One place, so SQL and docs agree.
STATE_COLUMN = "dc_state"
ATTEMPT_COLUMN = "dc_attempt"
DISPATCHED_AT_COLUMN = "dc_dispatched_at"
DUE_INDEX = "dc_due"
DISPATCH_COLUMNS = frozenset({STATE_COLUMN, ATTEMPT_COLUMN, DISPATCHED_AT_COLUMN})
