"""Every SQL statement duecast runs against a source table, each named, with the index it relies on.

Identifiers come only from validated settings (shared.identifiers); values are always parameters.
Times are always NOW(6) on the server, shifted by integer microseconds: client clocks never count.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

from ..entries import Entry
from ..identifiers import quote
from ..policy import catch_up_s
from ..settings import SourceSettings
from ..states import (
    ATTEMPT_COLUMN,
    DISPATCHED_AT_COLUMN,
    DUE_INDEX,
    STATE_COLUMN,
    State,
)

IDLE, DISPATCHED, RUNNING = int(State.IDLE), int(State.DISPATCHED), int(State.RUNNING)


@dataclass(frozen=True)
class SourceSQL:
    """The statements for one source, rendered once at start-up from its validated names."""

    id_column: str  # quoted
    claim_due: str
    due_visible: str
    mark_dispatched: str
    lock_dispatched: str
    lock_dispatched_skip: str
    count_dispatched: str
    mark_running: str
    give_back: str
    lock_leased: str
    extend_lease: str
    leased: str
    lock_running: str
    lock_attempt: str
    ack_touch: str
    ack_delete: str
    fail_rescan: str
    fail_oneoff: str
    release_unpushed: str
    find_expired: str
    requeue: str
    find_interrupted: str
    requeue_interrupted: str
    release_all: str
    count_due: str
    count_in_flight: str
    oldest_due_age: str
    check_schema: str


def render(src: SourceSettings) -> SourceSQL:
    t, pk, due = quote(src.table), quote(src.id_column), quote(src.due_column)
    st, att, disp, ix = (
        quote(STATE_COLUMN),
        quote(ATTEMPT_COLUMN),
        quote(DISPATCHED_AT_COLUMN),
        quote(DUE_INDEX),
    )
    # A row is due when due <= NOW(6) - period; the parameter is the period in microseconds.
    due_now = f"{st} = {IDLE} AND {due} <= NOW(6) - INTERVAL %s MICROSECOND"
    # Fenced statements carry a `{fence}` placeholder: see fence().
    fenced = f"{{fence}} AND {st} = {DISPATCHED}"
    running = f"{{fence}} AND {st} = {RUNNING}"
    return SourceSQL(
        id_column=pk,
        # Claim step 1: the oldest due rows, locked. Walks dc_due (state, due, id) from its
        # start, so it reads only due rows whatever the table size; SKIP LOCKED lets a second
        # dispatcher pass over rows the first is claiming instead of waiting or double-claiming.
        claim_due=(
            f"SELECT {pk}, {att} FROM {t} FORCE INDEX ({ix}) WHERE {due_now} "
            f"ORDER BY {due}, {pk} LIMIT %s FOR UPDATE SKIP LOCKED"
        ),
        # After a claim that took fewer rows than it asked for (so it walked every due row): the
        # due rows a plain (consistent, non-locking) read sees, up to a cap. Those the claim did
        # not take were passed over by SKIP LOCKED: another session holds them (an application's
        # transaction, or another dispatcher's claim for those microseconds).
        due_visible=(
            f"SELECT COUNT(*) FROM (SELECT 1 FROM {t} FORCE INDEX ({ix}) WHERE {due_now} "
            f"ORDER BY {due}, {pk} LIMIT %s) AS due_rows"
        ),
        # Claim step 2: IDLE -> DISPATCHED with a new attempt; PRIMARY range on the locked ids.
        mark_dispatched=(
            f"UPDATE {t} SET {st} = {DISPATCHED}, {att} = {att} + 1, {disp} = NOW(6) WHERE {{ids}}"
        ),
        # Worker start step 1: lock the rows of its entries still DISPATCHED under their attempt;
        # PRIMARY eq_ref per id. It waits (briefly) for a lock rather than skipping: the
        # dispatcher's and sweeper's scans lock rows for microseconds, and skipping those would
        # strand the row until the visibility timeout. A duplicate entry being started elsewhere
        # waits for that start's commit, then no longer matches the fence.
        lock_dispatched=f"SELECT {{columns}} FROM {t} FORCE INDEX (PRIMARY) WHERE {fenced} FOR UPDATE",
        # ...and when that wait times out (an application's transaction holds a row), skip what is held.
        lock_dispatched_skip=(
            f"SELECT {{columns}} FROM {t} FORCE INDEX (PRIMARY) WHERE {fenced} FOR UPDATE SKIP LOCKED"
        ),
        # ...and then how many of them a plain (consistent, non-locking) read sees: those the
        # skipping read did not lock are held by another session (an application's transaction).
        count_dispatched=f"SELECT COUNT(*) FROM {t} FORCE INDEX (PRIMARY) WHERE {fenced}",
        # Worker start step 2, on the rows step 1 locked: DISPATCHED -> RUNNING, committed before any
        # handler runs, so no copy of the entry matches any more. dc_dispatched_at is now the lease's
        # last renewal. PRIMARY.
        mark_running=f"UPDATE {t} FORCE INDEX (PRIMARY) SET {st} = {RUNNING}, {disp} = NOW(6) WHERE {fenced}",
        # A start whose commit came too late to run its rows (keeper.in_time): due again at once,
        # nothing ran; the next claim bumps the attempt.
        give_back=f"UPDATE {t} FORCE INDEX (PRIMARY) SET {st} = {IDLE} WHERE {running}",
        # The lease keeper, while checks run (its own connection; PRIMARY). Step 1: lock the rows
        # still RUNNING under their attempt, skipping rows another session holds (an ack, or an
        # application's transaction): the keeper never waits for a lock.
        lock_leased=f"SELECT {pk} FROM {t} FORCE INDEX (PRIMARY) WHERE {running} FOR UPDATE SKIP LOCKED",
        # Step 2, on the rows step 1 locked: fenced, so a lost row is never extended.
        extend_lease=f"UPDATE {t} FORCE INDEX (PRIMARY) SET {disp} = NOW(6) WHERE {running}",
        # Step 3, for rows step 1 did not lock: which still run under their attempt (locked
        # elsewhere for now); the others have lost their lease. A plain read: it waits for nobody.
        leased=f"SELECT {pk} FROM {t} FORCE INDEX (PRIMARY) WHERE {running}",
        # Range mode, finishing spans: lock the spans still RUNNING under the attempt they started
        # with, before their business rows are written; PRIMARY.
        lock_running=f"SELECT {pk} FROM {t} FORCE INDEX (PRIMARY) WHERE {running} FOR UPDATE",
        # ...and for a straggler whose span is finished: its span still at that attempt, in any
        # state (a claim since would have bumped it); PRIMARY.
        lock_attempt=f"SELECT {pk} FROM {t} FORCE INDEX (PRIMARY) WHERE {{fence}} FOR UPDATE",
        # Ack, re-scan: RUNNING -> IDLE, due again after period (+ an optional delay).
        # `{set}` is filled with validated column assignments from the handler's Ack.
        ack_touch=(
            f"UPDATE {t} FORCE INDEX (PRIMARY) SET {st} = {IDLE}, "
            f"{due} = NOW(6) + INTERVAL %s MICROSECOND{{set}} WHERE {running}"
        ),
        # Ack, one-off: the row is done and removed.
        # (The multi-table form: a single-table DELETE takes no index hint, and without one the
        # optimizer may scan a small table and lock rows other workers hold.)
        ack_delete=f"DELETE {t} FROM {t} FORCE INDEX (PRIMARY) WHERE {running}",
        # A failed check of a re-scan row: due again at its next period, as if checked now.
        fail_rescan=f"UPDATE {t} FORCE INDEX (PRIMARY) SET {st} = {IDLE}, {due} = NOW(6) WHERE {running}",
        # A failed one-off row: DISPATCHED for the sweeper (its visibility timeout, counted from now,
        # is the retry delay) under a new attempt, so a copy of its entry can never run it again.
        fail_oneoff=(
            f"UPDATE {t} FORCE INDEX (PRIMARY) SET {st} = {DISPATCHED}, {att} = {att} + 1, "
            f"{disp} = NOW(6) WHERE {running}"
        ),
        # Redelivery, when the RPUSH after a claim fails (Redis down), or for a dead worker's
        # popped batch: the rows go back to IDLE at once rather than waiting out the visibility
        # timeout; fenced, PRIMARY.
        release_unpushed=f"UPDATE {t} FORCE INDEX (PRIMARY) SET {st} = {IDLE} WHERE {fenced}",
        # Requeue step 1 (redelivery's sweep; its "lost" cause with no timeout): dispatched rows
        # never started (or failed, one-off) within the visibility timeout. Reads the DISPATCHED
        # prefix of dc_due (bounded by the high-water mark); SKIP LOCKED passes over rows a
        # worker is starting this instant: its start decides, and a started row is RUNNING.
        find_expired=(
            f"SELECT {pk} FROM {t} FORCE INDEX ({ix}) WHERE {st} = {DISPATCHED} "
            f"AND {disp} < NOW(6) - INTERVAL %s MICROSECOND LIMIT %s FOR UPDATE SKIP LOCKED"
        ),
        # Requeue step 2: DISPATCHED -> IDLE, due unchanged so the row is due at once. The
        # attempt is not touched here: the next claim bumps it, fencing every older copy.
        requeue=f"UPDATE {t} SET {st} = {IDLE} WHERE {{ids}} AND {st} = {DISPATCHED}",
        # Redelivery's "interrupted" cause, step 1: started rows whose lease ran out (not renewed
        # for lease_s, %s µs): their worker died or stopped. Reads the RUNNING prefix of dc_due,
        # bounded by the rows in flight; SKIP LOCKED passes over rows being acked or renewed.
        find_interrupted=(
            f"SELECT {pk} FROM {t} FORCE INDEX ({ix}) WHERE {st} = {RUNNING} "
            f"AND {disp} < NOW(6) - INTERVAL %s MICROSECOND LIMIT %s FOR UPDATE SKIP LOCKED"
        ),
        # Step 2: RUNNING -> IDLE, due unchanged so the row is due at once; the next claim bumps
        # the attempt, and the dead worker's late ack (fenced on RUNNING) matches nothing.
        requeue_interrupted=f"UPDATE {t} SET {st} = {IDLE} WHERE {{ids}} AND {st} = {RUNNING}",
        # Demo/tests start-up only, with no dispatcher or worker running: every row in flight
        # back to IDLE at once instead of waiting out its timeout or lease.
        release_all=f"UPDATE {t} SET {st} = {IDLE} WHERE {st} IN ({DISPATCHED}, {RUNNING})",
        # Status: due backlog, capped so a huge backlog costs a bounded dc_due range read.
        count_due=(
            f"SELECT COUNT(*) FROM (SELECT 1 FROM {t} FORCE INDEX ({ix}) WHERE {due_now} "
            "LIMIT %s) AS due_rows"
        ),
        # Status: rows claimed or started, not yet finished (the dc_due prefixes 1 and 2).
        count_in_flight=(
            f"SELECT COUNT(*) FROM {t} FORCE INDEX ({ix}) WHERE {st} IN ({DISPATCHED}, {RUNNING})"
        ),
        # Status: seconds since the least recently handled row became due (its staleness for
        # re-scan sources); three dc_due index dives, one per state.
        oldest_due_age=(
            f"SELECT TIMESTAMPDIFF(MICROSECOND, MIN({due}), NOW(6)) - %s FROM ("
            + " UNION ALL ".join(
                f"(SELECT {due} FROM {t} FORCE INDEX ({ix}) WHERE {st} = {state} ORDER BY {due} LIMIT 1)"
                for state in (IDLE, DISPATCHED, RUNNING)
            )
            + ") AS heads"
        ),
        check_schema=(
            "SELECT COLUMN_NAME, DATA_TYPE FROM information_schema.COLUMNS "
            "WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = %s"
        ),
    )


def _not_int(value: object) -> str:
    raise TypeError(f"only ints may be rendered into SQL, not {type(value).__name__}")


def int_list(values: Iterable[int]) -> str:
    """Render integers as SQL text: `1,2,3`. Refuses anything that is not a real int."""
    out = [str(v) if type(v) is int else _not_int(v) for v in values]
    if not out:
        raise ValueError("an IN list needs at least one value")
    return ",".join(out)


# One IN list stays one PRIMARY range list (db.connect turns off MariaDB's IN-to-subquery rewrite);
# chunks only keep a huge list's statement text and range optimiser memory bounded.
IN_CHUNK = 10_000


def in_list(column: str, values: Iterable[int]) -> str:
    """`col IN (...)`, or `(col IN (...) OR col IN (...))` past IN_CHUNK values (`column` is quoted)."""
    ids = [str(v) if type(v) is int else _not_int(v) for v in values]
    if not ids:
        raise ValueError("an IN list needs at least one value")
    parts = [f"{column} IN ({','.join(ids[i : i + IN_CHUNK])})" for i in range(0, len(ids), IN_CHUNK)]
    return parts[0] if len(parts) == 1 else "(" + " OR ".join(parts) + ")"


ATTEMPT = quote(ATTEMPT_COLUMN)


def fence(entries: Iterable[Entry], id_column: str) -> str:
    """The compare-and-set of a batch: `(id IN (...) AND attempt = n) OR ...`, one group per attempt.

    Every store's fenced statements take it as `{fence}` (`id_column` quoted: the source's key, a
    job's `id`, a delivery's `seq`). Grouping by attempt keeps it to plain PRIMARY range lookups with
    a scalar compare (a row-constructor IN costs a materialised subquery). Ids and attempts are
    Python ints rendered by int_list, so no value text from outside ever reaches SQL.
    """
    groups: dict[int, list[int]] = defaultdict(list)
    for e in entries:
        groups[e.attempt].append(e.id)
    if not groups:
        raise ValueError("a fence needs at least one entry")
    parts = [
        f"({in_list(id_column, ids)} AND {ATTEMPT} = {int_list([attempt])})"
        for attempt, ids in sorted(groups.items())
    ]
    return "(" + " OR ".join(parts) + ")"


def column_list(columns: Iterable[str]) -> str:
    """`*` or a quoted, validated column list for a locking read."""
    cols = list(columns)
    return "*" if not cols else ", ".join(quote(c) for c in cols)


def assignments(columns: list[str]) -> str:
    """`, col = %s` for each (already validated and quoted-safe) column of an Ack."""
    return "".join(f", {quote(c)} = %s" for c in columns)


@dataclass(frozen=True)
class LeaderSQL:
    """A named lease (leader election) in duecast's leases table: one row per name."""

    acquire: str
    holder: str
    resign: str


def render_leases(table: str) -> LeaderSQL:
    t = quote(table)
    return LeaderSQL(
        # Take the lease if it is free or expired, renew it if it is ours; otherwise change
        # nothing. ON DUPLICATE KEY UPDATE assigns left to right, so the second IF already sees
        # the new holder. PRIMARY; one row lock, held for this statement's transaction only.
        acquire=(
            f"INSERT INTO {t} (`name`, `holder`, `expires_at`) "
            "VALUES (%s, %s, NOW(6) + INTERVAL %s MICROSECOND) ON DUPLICATE KEY UPDATE "
            "`holder` = IF(`expires_at` < NOW(6) OR `holder` = VALUES(`holder`), "
            "VALUES(`holder`), `holder`), "
            "`expires_at` = IF(`holder` = VALUES(`holder`), VALUES(`expires_at`), `expires_at`)"
        ),
        # Who holds it now, and for how many more microseconds (by the database's clock).
        holder=(
            f"SELECT `holder`, TIMESTAMPDIFF(MICROSECOND, NOW(6), `expires_at`) FROM {t} WHERE `name` = %s"
        ),
        # A leader that stops hands over at once instead of letting the lease run out.
        resign=f"UPDATE {t} SET `expires_at` = NOW(6) WHERE `name` = %s AND `holder` = %s",
    )


@dataclass(frozen=True)
class WorkerSQL:
    """The worker registry: one row per live worker process, beating."""

    register: str
    beat: str
    deregister: str
    dead: str
    alive: str


def render_workers(table: str) -> WorkerSQL:
    t = quote(table)
    return WorkerSQL(
        register=(
            f"INSERT INTO {t} (`name`, `host`, `pid`, `sources`, `tasks`, `started_at`, `heartbeat_at`) "
            "VALUES (%s, %s, %s, %s, %s, NOW(6), NOW(6)) ON DUPLICATE KEY UPDATE `heartbeat_at` = NOW(6)"
        ),
        beat=f"UPDATE {t} SET `heartbeat_at` = NOW(6) WHERE `name` = %s",
        deregister=f"DELETE FROM {t} WHERE `name` = %s",
        # Silent longer than dead_after (µs), by the database's clock. PRIMARY scan: the table
        # holds one row per live worker.
        dead=f"SELECT `name` FROM {t} WHERE `heartbeat_at` < NOW(6) - INTERVAL %s MICROSECOND",
        alive=(
            "SELECT `name`, `host`, `pid`, `sources`, `tasks`, `started_at`, "
            f"TIMESTAMPDIFF(MICROSECOND, `heartbeat_at`, NOW(6)) FROM {t} "
            "WHERE `heartbeat_at` >= NOW(6) - INTERVAL %s MICROSECOND ORDER BY `name`"
        ),
    )


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
    period_us, catch_up_us = round(src.period_s * 1_000_000), round(catch_up_s(src.period_s) * 1_000_000)
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
        # A range's ack (in place of the row machinery's ack_touch): a fixed rate, not a fixed
        # delay. The span is due a period after the slot it was due at, so a check made d late
        # does not make every later check d later too (1M users every 10 s is 100,000 checks/s,
        # not 1M / (10 s + d)). A span more than catch_up late (an outage, an overload) restarts
        # its cadence from NOW(6) - catch_up instead of being due again at once (policy.catch_up_s).
        # So checked_at is the slot a check served: never later than the check, and at most
        # catch_up earlier; staleness read from it errs on the old side. PRIMARY, fenced on RUNNING.
        ack_checked=(
            f"UPDATE {r} FORCE INDEX (PRIMARY) SET {st} = {IDLE}, `checked_at` = GREATEST("
            f"`checked_at` + INTERVAL {period_us} MICROSECOND, NOW(6) - INTERVAL {catch_up_us} MICROSECOND"
            f") + INTERVAL %s MICROSECOND{{set}} WHERE {{fence}} AND {st} = {RUNNING}"
        ),
        # Only rows whose handler asked for a change are written (their due column records the
        # change, as a touch does in row mode); PRIMARY lookups. `{set}` starts with ", ".
        set_values=f"UPDATE {t} FORCE INDEX (PRIMARY) SET {due} = NOW(6){{set}} WHERE {{ids}}",
        delete_ids=f"DELETE {t} FROM {t} FORCE INDEX (PRIMARY) WHERE {{ids}}",
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
            f"SELECT s.range_id, s.lo, s.lo + {size}, '2000-01-01 00:00:00' FROM ("
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


def spans(bounds: Iterable[tuple[int, int]], id_column: str) -> str:
    """`(id >= lo AND id < hi) OR ...` for integer bounds (id_column already quoted)."""
    parts = [f"({id_column} >= {int_list([lo])} AND {id_column} < {int_list([hi])})" for lo, hi in bounds]
    if not parts:
        raise ValueError("spans needs at least one range")
    return "(" + " OR ".join(parts) + ")"
