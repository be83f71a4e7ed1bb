"""Concurrency keys as `duecast status` and the dashboard show them: per key-limited queue
(`[jobs.key_limits.<queue>]`), its max_running_per_key, its busiest keys now and how many keys have
pending jobs, read by shared.queries.key_status's bounded reads."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..queries.key_status import JOBS_READ, RUNS_READ, render_key_status
from ..settings import JobsSettings
from .db import Database

BUSIEST_SHOWN = 5  # keys shown per queue, busiest first


@dataclass(frozen=True)
class KeyLimitState:
    """One key-limited queue now. `busiest`: (key, jobs in flight), most first; `keys_in_flight`:
    keys with a job in flight; `keys_pending`: keys with pending jobs (those in a run not yet
    finished among them); `pending_capped`: counted over the first JOBS_READ pending keyed jobs only
    (shown as `N+`); `partial`: the read of runs stopped at RUNS_READ, so the counts in flight are of
    its first runs only."""

    queue: str
    max_running_per_key: int
    busiest: list[tuple[str, int]] = field(default_factory=list)
    keys_in_flight: int = 0
    keys_pending: int = 0
    partial: bool = False
    pending_capped: bool = False


def read_key_limits(db: Database, jobs: JobsSettings, shown: int = BUSIEST_SHOWN) -> list[KeyLimitState]:
    """Every key-limited queue's state, queues by name; none where jobs are off or no key is limited
    (no read: dc_key is there only where keys are limited)."""
    if not jobs.enabled or not jobs.key_limits:
        return []
    sql = render_key_status(jobs.table, jobs.runs_table)
    out = []
    with db.transaction() as cur:
        for queue, lim in sorted(jobs.key_limits.items()):
            cur.execute(sql.busiest, (queue, RUNS_READ, shown))
            rows = cur.fetchall()
            busiest = [(str(k), int(n)) for k, n, _, _ in rows]
            keys = int(rows[0][2]) if rows else 0
            runs = int(rows[0][3]) if rows else 0
            cur.execute(sql.keys_pending, (queue, JOBS_READ))
            row = cur.fetchone()
            pending, read = (int(row[0]), int(row[1])) if row else (0, 0)
            out.append(
                KeyLimitState(
                    queue,
                    lim.max_running_per_key,
                    busiest,
                    keys,
                    pending,
                    runs >= RUNS_READ,
                    read >= JOBS_READ,
                )
            )
    return out
