"""The one state vocabulary of a dispatchable row, used in SQL, code, logs and stats.

The numeric values are stored in each source's `dc_state` column; never renumber them.
"""

from enum import IntEnum


class State(IntEnum):
    IDLE = 0  # waiting to become due (a re-scan row between checks, or a pending job)
    DISPATCHED = 1  # claimed by a dispatcher with a new attempt; its entry is in Redis or on its way
    # One-off jobs only (re-scan rows go straight from DISPATCHED back to IDLE):
    RUNNING = 2  # a worker committed that it started this attempt; it holds a lease (lease_until)
    DONE = 3  # finished; kept for jobs.retention_s, then pruned
    DEAD = 4  # failed max_attempts times, interrupted too often, or discarded; kept for inspection


# Names as shown by `duecast jobs` and status (a pending job is IDLE).
STATE_NAMES = {
    State.IDLE: "pending",
    State.DISPATCHED: "dispatched",
    State.RUNNING: "running",
    State.DONE: "done",
    State.DEAD: "dead",
}


# Column names duecast adds to every source table. One place, so SQL and docs agree.
STATE_COLUMN = "dc_state"
ATTEMPT_COLUMN = "dc_attempt"
DISPATCHED_AT_COLUMN = "dc_dispatched_at"
DUE_INDEX = "dc_due"
DISPATCH_COLUMNS = frozenset({STATE_COLUMN, ATTEMPT_COLUMN, DISPATCHED_AT_COLUMN})
