"""The one state vocabulary of a dispatchable row, used in SQL, code, logs and stats.

The numeric values are stored in each source's `dc_state` column; never renumber them.
"""

from enum import IntEnum


class State(IntEnum):
    IDLE = 0  # waiting to become due (a re-scan row between checks, or a pending job)
    DISPATCHED = 1  # claimed by a dispatcher with a new attempt; its entry is in Redis or on its way
    # A worker committed that it started this attempt, and holds a lease on it while its handler
    # runs (jobs and deliveries: lease_until; a source's rows and spans: dc_dispatched_at, the
    # lease's last renewal). Sources go back to IDLE (or DISPATCHED, a one-off row that failed).
    RUNNING = 2
    # Jobs and deliveries only:
    DONE = 3  # finished; kept for jobs.retention_s, then pruned
    DEAD = 4  # failed max_attempts times, interrupted too often, or discarded; kept for inspection
    # Jobs only: cancelled by an operator or the application (Enqueuer.cancel) before it finished;
    # final, kept like dead jobs (jobs.dead_retention_s). Any later finish of it is stale.
    CANCELLED = 5


# Names as shown by `duecast jobs` and status (a pending job is IDLE).
STATE_NAMES = {
    State.IDLE: "pending",
    State.DISPATCHED: "dispatched",
    State.RUNNING: "running",
    State.DONE: "done",
    State.DEAD: "dead",
    State.CANCELLED: "cancelled",
}


# Column names duecast adds to every source table. One place, so SQL and docs agree.
STATE_COLUMN = "dc_state"
ATTEMPT_COLUMN = "dc_attempt"
DISPATCHED_AT_COLUMN = "dc_dispatched_at"
DUE_INDEX = "dc_due"
DISPATCH_COLUMNS = frozenset({STATE_COLUMN, ATTEMPT_COLUMN, DISPATCHED_AT_COLUMN})
