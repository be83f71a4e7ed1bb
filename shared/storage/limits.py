"""Fleet-wide limits at claim time: a token bucket and a reservation per limited source, queue, task
or cluster group, in MySQL (duecast_limits), so every dispatcher, and a new leader after a failover,
sees the same ones."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

from ..limit_policy import bucket_tokens, limited_claim
from ..queries.limits import (
    count_rows,
    deliveries_in_flight,
    first_pending_run,
    jobs_in_flight,
    render_limits,
    rows_in_flight,
    task_jobs_in_flight,
)
from ..queries.ranges import ranges_table
from ..settings import JobsSettings, SourceSettings
from ..settings.limits import Limits
from ..settings.topics import TOPICS_SOURCE
from .db import Database
from .leased.groups import GroupStore
from .leased.jobs import JobStore
from .range_store import RangeStore
from .schema import SchemaError, described, unseen
from .source_store import SourceStore
from .units import MYSQL_ERRORS, Cursor, StorageError

# How long a claim's reservation counts against max_running: far longer than a claim takes, short
# enough that the reservation of a dispatcher killed mid-claim is given back soon.
RESERVE_S = 30.0
TASK_PREFIX = "task:"  # a limited task's bucket row: `task:<name>`, one across every queue
GROUP_PREFIX = "group:"  # a limited cluster group's bucket row: `group:<topic>/<group>`


def task_limit_name(task: str) -> str:
    return f"{TASK_PREFIX}{task}"


def limit_name(source: str) -> str:
    """A limited source's bucket row: its name, but a cluster group's `group:<topic>/<group>`
    (its source is `topics.<topic>-<group>`: configured sources have no dot, names no "-")."""
    prefix = f"{TOPICS_SOURCE}."
    if not source.startswith(prefix):
        return source
    topic, _, group = source.removeprefix(prefix).partition("-")
    return f"{GROUP_PREFIX}{topic}/{group}"


@dataclass(frozen=True)
class Grant:
    """What one claim may take: `entries` (of `unit` checks each), `checks` reserved for it, and the
    tokens the bucket holds after it (None: no rate limit)."""

    entries: int
    checks: int
    tokens: float | None


class LimitStore:
    """One source's, queue's or task's limits. `reserve` (one transaction, committed) before its
    claim, `settle` after: a dispatcher dying in between only leaves tokens unspent, never a limit
    exceeded. `name` is its bucket's row (a task's: task_limit_name)."""

    def __init__(
        self,
        db: Database,
        table: str,
        src: Limits,
        unit: int,
        in_flight: tuple[str, tuple[object, ...]],
        *,
        name: str = "",
    ) -> None:
        self.db = db
        self.src = src
        self.name = name or limit_name(getattr(src, "name", ""))
        self.unit = unit  # checks per entry: range_size in range mode, else 1
        self.rate = src.rate_limit_per_s
        self.burst = src.burst(unit)
        self.sql = render_limits(table)
        self._in_flight = in_flight
        # A job queue's: the run its next claim takes first (claimed whole, whatever the limit).
        self.pending: tuple[str, tuple[object, ...]] | None = None
        self._made = False

    def verify(self) -> None:
        """The limits table exists and this account may use it (else one line: run `duecast migrate`)."""
        what = f"{self.name}'s limits: table {self.sql.table}"
        with self.db.transaction() as cur:
            if not described(cur, self.sql.table, what).columns:
                raise SchemaError(unseen(cur, what, self.sql.table))

    def reserve(self, want: int) -> Grant:
        """Take the bucket's lock, refill it by MySQL's clock, count what is in flight, and spend the
        tokens of as many entries (of `want`) as both limits allow."""
        if not self._made:
            # Its own unit: INSERT IGNORE of a row that exists takes a shared lock, and two
            # dispatchers holding one each would deadlock on the FOR UPDATE below.
            with self.db.transaction() as cur:
                cur.execute(self.sql.ensure, (self.name, self.burst))
            self._made = True
        with self.db.transaction() as cur:
            cur.execute(self.sql.lock, (self.name,))
            row = cur.fetchone()
            if row is None:
                raise StorageError(
                    f"limits row {self.name} is missing from {self.sql.table}; run `duecast migrate`"
                )
            stored, elapsed_us, now, reserved = float(row[0]), int(row[1] or 0), row[2], int(row[3] or 0)
            tokens = (
                None if self.rate is None else bucket_tokens(stored, elapsed_us / 1e6, self.rate, self.burst)
            )
            room = None
            cap = self.src.max_running
            if cap is not None:
                sql, args = self._in_flight
                cur.execute(sql, args)
                counted = cur.fetchone()
                in_flight = int(counted[0] if counted else 0) * self.unit  # a span counts its range_size
                room = cap - in_flight - reserved
            entries = limited_claim(want, self.unit, tokens, room)
            busy = room is not None and cap is not None and room < cap
            if entries > 0 and busy and self._run_too_big(cur, entries):
                entries = 0  # the slots add up until it fits: no fresh claim takes them meanwhile
            checks = entries * self.unit
            left = stored if tokens is None else tokens - checks
            # Only max_running counts a reservation: a rate is paid for by the tokens themselves.
            held = reserved + checks if room is not None else 0
            cur.execute(self.sql.reserve, (left, now, held, now, round(RESERVE_S * 1e6), self.name))
        return Grant(entries, checks, left if tokens is not None else None)

    def _run_too_big(self, cur: Cursor, entries: int) -> bool:
        """Whether the job run the claim would take first is larger than it may take (while nothing
        is in flight, room == max_running, it is taken anyway: it could never fit better)."""
        if self.pending is None:
            return False
        sql, args = self.pending
        cur.execute(sql, args)
        row = cur.fetchone()
        return row is not None and int(row[0]) > entries

    def settle(self, grant: Grant, used_checks: int) -> None:
        """The claim is committed: give back the tokens it did not use (a claim that took more, a job
        run given back whole, leaves the bucket in debt) and end its reservation."""
        unused = grant.checks - used_checks if self.rate is not None else 0
        if unused == 0 and (grant.checks == 0 or self.src.max_running is None):
            return  # nothing to give back, and no reservation counts (rate limits only)
        with self.db.transaction() as cur:
            cur.execute(self.sql.settle, (unused, self.burst, grant.checks, self.name))

    def abandon(self, grant: Grant) -> None:
        """The claim failed: give everything back if MySQL answers; else the reservation runs out by
        itself and the tokens stay spent (under-used, never exceeded)."""
        with contextlib.suppress(*MYSQL_ERRORS):
            self.settle(grant, 0)

    def note_demand(self, allowed_period_s: float | None) -> None:
        """Record the period this source's rate allows while its demand exceeds it (None: it fits)."""
        with self.db.transaction() as cur:
            cur.execute(self.sql.note_demand, (allowed_period_s, self.name))

    def rows(self, table: str) -> int:
        """Rows of a re-scan source's table (the demand its period asks for)."""
        with self.db.transaction() as cur:
            cur.execute(count_rows(table))
            row = cur.fetchone()
        return int(row[0]) if row else 0


@dataclass(frozen=True)
class LimitState:
    """A limited source or queue as `duecast status` shows it: its settings, and its bucket (None:
    no dispatcher has claimed for it yet)."""

    name: str
    rate_limit_per_s: float | None
    burst: float | None
    max_running: int | None
    tokens: float | None
    allowed_period_s: float | None


def read_limits(
    db: Database, table: str, sources: list[SourceSettings], jobs: JobsSettings | None = None
) -> list[LimitState]:
    """Every limited source's, group's and task's state (a task's named task_limit_name, a group's
    limit_name); its tokens refilled to now by MySQL's clock."""
    with db.transaction() as cur:
        cur.execute(render_limits(table).read_all)
        rows = {str(n): (float(t), int(e or 0), p) for n, t, e, p in cur.fetchall()}
    limited: list[tuple[str, Limits, int]] = [
        (limit_name(src.name), src, src.range_size if src.mode == "ranges" else 1)
        for src in sources
        if src.limited
    ]
    if jobs is not None and jobs.enabled:
        limited += [(task_limit_name(t), lim, 1) for t, lim in sorted(jobs.task_limits.items())]
    states = []
    for name, lim, unit in limited:
        burst = lim.burst(unit) if lim.rate_limit_per_s is not None else None
        tokens = period = None
        if name in rows:
            stored, elapsed_us, noted = rows[name]
            if lim.rate_limit_per_s is not None and burst is not None:
                tokens = bucket_tokens(stored, elapsed_us / 1e6, lim.rate_limit_per_s, burst)
            period = None if noted is None else float(noted)
        states.append(LimitState(name, lim.rate_limit_per_s, burst, lim.max_running, tokens, period))
    return states


def task_limit_stores(store: object, table: str) -> dict[str, LimitStore]:
    """A job queue's limited tasks' limits (`[jobs.task_limits]`), by task: one bucket per task
    (task_limit_name) shared by every queue; max_running counts the task's runs in every queue."""
    if not isinstance(store, JobStore) or store.tasks is None:
        return {}
    jobs = store.jobs
    vis_us = round(jobs.visibility_timeout_s * 1e6)
    out = {}
    for task in store.limited_tasks:
        in_flight = (task_jobs_in_flight(jobs.runs_table), (task, vis_us))
        lim = LimitStore(store.db, table, jobs.task_limits[task], 1, in_flight, name=task_limit_name(task))
        lim.pending = (store.tasks.sql.first_pending, (task, store.queue))
        out[task] = lim
    return out


def limit_store(store: object, table: str) -> tuple[LimitStore, str] | None:
    """The limits of a dispatcher's store, and its business table (None: it has none)."""
    vis_us = 0
    if isinstance(store, GroupStore):
        src = store.src  # its group's limits (TopicsSettings.group_sources)
        gid = store.group_id
        if src.limited and not gid:  # group 0 holds nothing: max_running would never bind
            raise StorageError(f"{src.name}: its store is not verified yet; call verify() first")
        counted = (gid, round(src.visibility_timeout_s * 1e6), gid)
        in_flight = (deliveries_in_flight(store.topics.table("deliveries")), counted)
        group = LimitStore(store.db, table, src, 1, in_flight)
        return (group, src.table) if src.limited else None
    if isinstance(store, RangeStore):
        src = store.business
        vis_us = round(src.visibility_timeout_s * 1e6)
        args: tuple[object, ...] = (vis_us, round(src.lease_s * 1e6))
        ranges = LimitStore(store.db, table, src, src.range_size, (rows_in_flight(ranges_table(src)), args))
        return (ranges, src.table) if src.limited else None
    if isinstance(store, JobStore):
        src = store.src
        args = (store.queue, round(src.visibility_timeout_s * 1e6))
        jobs = LimitStore(store.db, table, src, 1, (jobs_in_flight(store.jobs.runs_table), args))
        jobs.pending = (first_pending_run(store.jobs.runs_table), (store.queue,))
        return (jobs, src.table) if src.limited else None
    if isinstance(store, SourceStore):
        src = store.src
        args = (round(src.visibility_timeout_s * 1e6), round(src.lease_s * 1e6))
        rows = LimitStore(store.db, table, src, 1, (rows_in_flight(src.table), args))
        return (rows, src.table) if src.limited else None
    return None
