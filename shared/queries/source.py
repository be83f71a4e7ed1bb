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
from ..settings import SourceSettings
from ..states import (
    ATTEMPT_COLUMN,
    DISPATCHED_AT_COLUMN,
    DUE_INDEX,
    STATE_COLUMN,
    State,
)
from .pace import slot_sql

IDLE, DISPATCHED, RUNNING = int(State.IDLE), int(State.DISPATCHED), int(State.RUNNING)
# A worker's start reads the server's time once, in its transaction, and writes it as the start's
# (a row's dc_dispatched_at, a run's or delivery's started_at): after a COMMIT that got no answer,
# finding it there says that this start committed (issue 24.5), found nowhere that it did not.
START_TIME = "SELECT NOW(6)"


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
    started_by: str
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
    requeue_started: str
    find_expired: str
    requeue: str
    find_interrupted: str
    requeue_interrupted: str
    release_all: str
    count_due: str
    count_in_flight: str
    oldest_due_age: str
    check_schema: str


@dataclass(frozen=True)
class _SourceNames:
    """A source's quoted names and the fragments its statements share."""

    t: str
    pk: str
    due: str
    st: str
    att: str
    disp: str
    ix: str
    due_now: str
    fenced: str
    running: str
    checked: str  # what a re-scan check records in the due column: its slot (shared.queries.pace)


def _source_names(src: SourceSettings) -> _SourceNames:
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
    period_us = round(src.period_s * 1_000_000)
    checked = slot_sql(pk, period_us) if period_us > 0 else "NOW(6)"
    return _SourceNames(
        t=t,
        pk=pk,
        due=due,
        st=st,
        att=att,
        disp=disp,
        ix=ix,
        due_now=due_now,
        fenced=fenced,
        running=running,
        checked=checked,
    )


def render(src: SourceSettings) -> SourceSQL:
    n = _source_names(src)
    return SourceSQL(
        id_column=n.pk,
        **_claiming(n),
        **_starting(n),
        **_leasing(n),
        **_finishing(n),
        **_requeueing(n),
        **_status(n),
    )


def _claiming(n: _SourceNames) -> dict[str, str]:
    """Claiming due rows, IDLE -> DISPATCHED (the dispatcher)."""
    t, pk, due, st, att = n.t, n.pk, n.due, n.st, n.att
    disp, ix, due_now = n.disp, n.ix, n.due_now
    return dict(
        # Claim step 1: the oldest due rows, locked. Walks dc_due (state, due, id) from its
        # start, so it reads only due rows whatever the table size; SKIP LOCKED lets a second
        # dispatcher pass over rows the first is claiming instead of waiting or double-claiming.
        # The third column says whether the row comes back (requeued, given back, its lease run
        # out: dispatched at least a period after it was due, which no check leaves it, as an ack
        # or a failed check sets the due column to a time at or before their own), so that its
        # entry goes ahead of the ready list's backlog (Redelivery.push_claimed). The parameters:
        # the period in microseconds, twice, then the limit.
        claim_due=(
            f"SELECT {pk}, {att}, {disp} >= {due} + INTERVAL %s MICROSECOND "
            f"FROM {t} FORCE INDEX ({ix}) WHERE {due_now} "
            f"ORDER BY {due}, {pk} LIMIT %s FOR UPDATE SKIP LOCKED"
        ),
        # After a claim that took fewer rows than it asked for (so it walked every due row): the
        # due rows a plain (consistent, non-locking) read sees, up to a cap. Those the claim did
        # not take were passed over by SKIP LOCKED: another session holds them (an application's
        # transaction, or for milliseconds duecast's own: another dispatcher's claim, an ack that
        # committed in between). Their ids: the dispatcher reports only rows held across claims.
        due_visible=f"SELECT {pk} FROM {t} FORCE INDEX ({ix}) WHERE {due_now} ORDER BY {due}, {pk} LIMIT %s",
        # Claim step 2: IDLE -> DISPATCHED with a new attempt; PRIMARY range on the locked ids.
        mark_dispatched=(
            f"UPDATE {t} SET {st} = {DISPATCHED}, {att} = {att} + 1, {disp} = NOW(6) WHERE {{ids}}"
        ),
    )


def _starting(n: _SourceNames) -> dict[str, str]:
    """A worker's start, DISPATCHED -> RUNNING, committed before any handler runs."""
    t, pk, st, disp, fenced, running = n.t, n.pk, n.st, n.disp, n.fenced, n.running
    return dict(
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
        # last renewal: the start's own NOW(6) (START_TIME, read in its transaction), which also
        # marks this start as the rows' starter (started_by). PRIMARY.
        mark_running=f"UPDATE {t} FORCE INDEX (PRIMARY) SET {st} = {RUNNING}, {disp} = %s WHERE {fenced}",
        # A start whose COMMIT got no answer: the rows it would have started, if it did (RUNNING
        # under their attempt since its START_TIME; no renewal has moved it, as no keeper holds
        # them). Locking: it waits for a start still open on a lost session to end. PRIMARY.
        started_by=f"SELECT {pk} FROM {t} FORCE INDEX (PRIMARY) WHERE {running} AND {disp} = %s FOR UPDATE",
        # A start whose commit came too late to run its rows (keeper.in_time): due again at once,
        # nothing ran; the next claim bumps the attempt.
        give_back=f"UPDATE {t} FORCE INDEX (PRIMARY) SET {st} = {IDLE} WHERE {running}",
    )


def _leasing(n: _SourceNames) -> dict[str, str]:
    """Leases of started rows (the keeper), and the locks of range mode's finishes."""
    t, pk, disp, running = n.t, n.pk, n.disp, n.running
    return dict(
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
    )


def _finishing(n: _SourceNames) -> dict[str, str]:
    """Acks and failed checks, RUNNING -> IDLE or gone; each fenced."""
    t, due, st, att, disp = n.t, n.due, n.st, n.att, n.disp
    running, checked = n.running, n.checked
    return dict(
        # Ack, re-scan: RUNNING -> IDLE, due again a period (+ an optional delay) after the slot
        # the check served: the latest time at or before NOW(6) at the row's phase, so the rows'
        # checks spread evenly over the period whatever their starting state (shared.queries.pace).
        # `{set}` is filled with validated column assignments from the handler's Ack.
        ack_touch=(
            f"UPDATE {t} FORCE INDEX (PRIMARY) SET {st} = {IDLE}, "
            f"{due} = {checked} + INTERVAL %s MICROSECOND{{set}} WHERE {running}"
        ),
        # Ack, one-off: the row is done and removed.
        ack_delete=delete_by_key(t, running, n.pk),
        # A failed check of a re-scan row: due again at its next period, as if checked now.
        fail_rescan=f"UPDATE {t} FORCE INDEX (PRIMARY) SET {st} = {IDLE}, {due} = {checked} WHERE {running}",
        # A failed one-off row: DISPATCHED for the sweeper (its visibility timeout, counted from now,
        # is the retry delay) under a new attempt, so a copy of its entry can never run it again.
        fail_oneoff=(
            f"UPDATE {t} FORCE INDEX (PRIMARY) SET {st} = {DISPATCHED}, {att} = {att} + 1, "
            f"{disp} = NOW(6) WHERE {running}"
        ),
    )


def _requeueing(n: _SourceNames) -> dict[str, str]:
    """Requeues by cause (redelivery), back to IDLE."""
    t, pk, st, disp, ix = n.t, n.pk, n.st, n.disp, n.ix
    fenced = n.fenced
    return dict(
        # Redelivery, when the RPUSH after a claim fails (Redis down), or for a dead worker's
        # popped batch: the rows go back to IDLE at once rather than waiting out the visibility
        # timeout; fenced, PRIMARY.
        release_unpushed=f"UPDATE {t} FORCE INDEX (PRIMARY) SET {st} = {IDLE} WHERE {fenced}",
        # The supervisor's hand-back of what its exited worker had started (the worker's started
        # records in Redis): RUNNING under the attempt it started -> IDLE, due unchanged so due at
        # once; the next claim bumps the attempt. Fenced on RUNNING and the attempt, so a row acked
        # or claimed again since is untouched, and the dead worker's ack can never land. PRIMARY.
        requeue_started=f"UPDATE {t} FORCE INDEX (PRIMARY) SET {st} = {IDLE} WHERE {n.running}",
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
    )


def _status(n: _SourceNames) -> dict[str, str]:
    """Status reads, bounded, and the schema check."""
    t, due, st, ix, due_now = n.t, n.due, n.st, n.ix, n.due_now
    return dict(
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


def delete_by_key(table: str, where: str, key: str) -> str:
    """A DELETE of the rows a `where` of ids names, run with the number of ids as its one
    parameter. A DELETE takes no index hint (nor does the multi-table form's hold where a scan
    costs less): on a small table (runs in flight, a short queue) the optimizer scans it, and waits
    on every row another session holds, another worker's open start or finish among them. `ORDER BY`
    the key with that exact `LIMIT` has it dive by PRIMARY instead (`key` and `table` are quoted)."""
    return f"DELETE FROM {table} WHERE {where} ORDER BY {key} LIMIT %s"


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


def spans(bounds: Iterable[tuple[int, int]], id_column: str) -> str:
    """`(id >= lo AND id < hi) OR ...` for integer bounds (id_column already quoted)."""
    parts = [f"({id_column} >= {int_list([lo])} AND {id_column} < {int_list([hi])})" for lo, hi in bounds]
    if not parts:
        raise ValueError("spans needs at least one range")
    return "(" + " OR ".join(parts) + ")"
