"""SQL of fleet-wide limits (shared/storage/limits.py runs it): the token buckets' table, and what
counts as in flight under max_running for a row-mode table, a ranges table, a job queue's runs and a
cluster group's deliveries."""

from __future__ import annotations

from dataclasses import dataclass

from ..identifiers import quote
from ..states import DISPATCHED_AT_COLUMN, STATE_COLUMN, State

IDLE, DISPATCHED, RUNNING = int(State.IDLE), int(State.DISPATCHED), int(State.RUNNING)


def limits_table_ddl(table: str) -> str:
    """One row per limited source or queue: its bucket (`tokens` at `refilled_at`, may go below 0
    when a claim took more than was left: debt, paid back first) and the checks being claimed now
    (`reserved`, until `reserved_until`: a dispatcher that died mid-claim holds nothing for long);
    `allowed_period_s`: set while a re-scan source's rows / period exceed its rate (what status shows)."""
    return f"""CREATE TABLE IF NOT EXISTS {quote(table)} (
  `name` VARCHAR(191) NOT NULL,
  `tokens` DOUBLE NOT NULL,
  `refilled_at` DATETIME(6) NOT NULL,
  `reserved` BIGINT NOT NULL DEFAULT 0,
  `reserved_until` DATETIME(6) NOT NULL,
  `allowed_period_s` DOUBLE NULL,
  PRIMARY KEY (`name`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin"""


@dataclass(frozen=True)
class LimitSQL:
    table: str
    ensure: str
    lock: str
    reserve: str
    settle: str
    read_all: str
    note_demand: str


def render_limits(table: str) -> LimitSQL:
    t = quote(table)
    return LimitSQL(
        table=table,
        # A bucket starts full (args: name, burst); a second dispatcher's INSERT is a no-op.
        ensure=f"INSERT IGNORE INTO {t} (`name`, `tokens`, `refilled_at`, `reserved`, `reserved_until`) "
        "VALUES (%s, %s, NOW(6), 0, NOW(6))",
        # The claim's first step: every dispatcher's claim of this name waits here (PRIMARY), so the
        # bucket and the in-flight count are read by one claim at a time. The time is MySQL's.
        lock=f"SELECT `tokens`, TIMESTAMPDIFF(MICROSECOND, `refilled_at`, NOW(6)), NOW(6), "
        f"IF(`reserved_until` > NOW(6), `reserved`, 0) FROM {t} WHERE `name` = %s FOR UPDATE",
        # Committed before the claim: its tokens are spent and its checks counted as in flight even
        # if this dispatcher dies before it claims (a limit is never exceeded, only under-used).
        reserve=f"UPDATE {t} SET `tokens` = %s, `refilled_at` = %s, `reserved` = %s, "
        "`reserved_until` = %s + INTERVAL %s MICROSECOND WHERE `name` = %s",
        # After the claim committed: what it did not take goes back (args: unused tokens, burst,
        # reserved checks, name); its claimed checks are now counted by the in-flight query.
        settle=f"UPDATE {t} SET `tokens` = LEAST(`tokens` + %s, %s), "
        "`reserved` = GREATEST(0, `reserved` - %s) WHERE `name` = %s",
        # Status: every bucket as it stands now (tokens refilled by the reader, not written).
        read_all=f"SELECT `name`, `tokens`, TIMESTAMPDIFF(MICROSECOND, `refilled_at`, NOW(6)), "
        f"`allowed_period_s` FROM {t}",
        # The dispatcher: the period a re-scan source's rate allows (NULL: the demand fits).
        note_demand=f"UPDATE {t} SET `allowed_period_s` = %s WHERE `name` = %s",
    )


def rows_in_flight(table: str) -> str:
    """Rows (or spans) of a source's table claimed within the visibility timeout, or started with a
    live lease (args: visibility timeout µs, lease µs): a dead worker's rows stop counting when
    their lease runs out, before redelivery requeues them. The dc_due index's state prefixes."""
    st, disp = quote(STATE_COLUMN), quote(DISPATCHED_AT_COLUMN)
    return (
        f"SELECT COUNT(*) FROM {quote(table)} FORCE INDEX (`dc_due`) WHERE "
        f"({st} = {DISPATCHED} AND {disp} > NOW(6) - INTERVAL %s MICROSECOND) OR "
        f"({st} = {RUNNING} AND {disp} > NOW(6) - INTERVAL %s MICROSECOND)"
    )


def jobs_in_flight(runs_table: str) -> str:
    """Jobs of a queue's runs claimed within the visibility timeout, or started with a live lease
    (args: queue, visibility timeout µs). A run's `jobs` counts its members still to finish."""
    return (
        f"SELECT COALESCE(SUM(`jobs`), 0) FROM {quote(runs_table)} FORCE INDEX (`dc_runs`) "
        f"WHERE `queue` = %s AND ((`dc_state` = {DISPATCHED} AND "
        "`dc_dispatched_at` > NOW(6) - INTERVAL %s MICROSECOND) OR "
        f"(`dc_state` = {RUNNING} AND `lease_until` > NOW(6)))"
    )


def first_pending_run(runs_table: str) -> str:
    """The jobs of the run a queue's next claim takes first (args: queue): a run given back whole is
    claimed whole, so under max_running it waits until it fits (the claim's order: dc_runs)."""
    return (
        f"SELECT `jobs` FROM {quote(runs_table)} FORCE INDEX (`dc_runs`) WHERE `queue` = %s "
        f"AND `dc_state` = {IDLE} ORDER BY `priority`, `id` LIMIT 1"
    )


def count_rows(table: str) -> str:
    """A limited re-scan source's rows, for the period its rate limit allows (PRIMARY, a full scan:
    run at most once a minute, and only for a source whose limit binds)."""
    return f"SELECT COUNT(*) FROM {quote(table)}"


def task_jobs_in_flight(runs_table: str) -> str:
    """A limited task's jobs, in every queue, in runs claimed within the visibility timeout or
    started with a live lease (args: task, visibility timeout µs): the runs of its own claims
    (shared/queries/task_runs.py). dc_task."""
    return (
        f"SELECT COALESCE(SUM(`jobs`), 0) FROM {quote(runs_table)} FORCE INDEX (`dc_task`) "
        f"WHERE `task` = %s AND ((`dc_state` = {DISPATCHED} AND "
        "`dc_dispatched_at` > NOW(6) - INTERVAL %s MICROSECOND) OR "
        f"(`dc_state` = {RUNNING} AND `lease_until` > NOW(6)))"
    )


def deliveries_in_flight(deliveries_table: str) -> str:
    """A cluster group's messages claimed within the visibility timeout, or started with a live
    lease (args: group id, visibility timeout µs, group id): a dead worker's stop counting when
    their leases run out. dc_due (dc_state, group_id, ...): one range per state."""
    d = quote(deliveries_table)
    return (
        f"SELECT (SELECT COUNT(*) FROM {d} FORCE INDEX (`dc_due`) WHERE `dc_state` = {DISPATCHED} "
        "AND `group_id` = %s AND `dc_dispatched_at` > NOW(6) - INTERVAL %s MICROSECOND) + "
        f"(SELECT COUNT(*) FROM {d} FORCE INDEX (`dc_due`) WHERE `dc_state` = {RUNNING} "
        "AND `group_id` = %s AND `lease_until` > NOW(6))"
    )
