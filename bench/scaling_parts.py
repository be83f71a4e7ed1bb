"""The measuring parts of bench/scaling.py: building the big source tables, timing claims on them
and summarising each, and the demo-driven throughput runs.
"""

from __future__ import annotations

import argparse
import statistics
import time
from dataclasses import dataclass
from typing import Any

import harness
import pymysql.cursors
import rescan
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from duecast.cli.demo import run as demo
from duecast.shared.identifiers import quote
from duecast.shared.queries.source import SourceSQL, in_list, render
from duecast.shared.settings import JobsSettings, Settings, SourceSettings, load_settings
from duecast.shared.storage.admin import migrate
from duecast.shared.storage.db import connect

TABLE_PREFIX = "bench_scan_"
CUT = "2010-01-01 00:00:00"  # updated_time before this: due; after it: not due
OLD_BASE = "2001-01-01 00:00:00"  # due rows are OLD_BASE + id seconds (before CUT up to ~280M ids)
CHUNK = 500_000  # rows per INSERT ... SELECT (one transaction each)
DEMAND_CAPPED = 0.9  # checks/s at 90% of users / period or more: the run kept up, so it shows demand
_DIGITS = "(SELECT 0 n UNION ALL " + " UNION ALL ".join(f"SELECT {i}" for i in range(1, 10)) + ")"


def scan_table(rows: int) -> str:
    return f"{TABLE_PREFIX}{rows}"


def scan_source(rows: int, batch: int) -> SourceSettings:
    name = scan_table(rows)
    return SourceSettings(
        name=name,
        table=name,
        id_column="user_id",
        due_column="updated_time",
        period_s=10,
        claim_batch=batch,
        high_water=max(40_000, batch),
    )


def _cursor(settings: Settings) -> tuple[pymysql.Connection[pymysql.cursors.Cursor], pymysql.cursors.Cursor]:
    conn = connect(settings.mysql)
    return conn, conn.cursor()


def _scalar(cur: pymysql.cursors.Cursor, sql: str, args: Any = None) -> Any:
    cur.execute(sql, args)
    row = cur.fetchone()
    return row[0] if row else None


def _numbers(cur: pymysql.cursors.Cursor, lo: int, hi: int) -> str:
    """A derived table of `seq` = lo..hi: MariaDB's Sequence engine, else a cross join of digits."""
    try:
        cur.execute("SELECT 1 FROM seq_1_to_1")
        cur.fetchall()
        return f"seq_{lo}_to_{hi}"
    except pymysql.err.MySQLError:
        digits = ", ".join(f"{_DIGITS} d{k}" for k in range(6))  # 10^6 >= CHUNK
        value = " + ".join(f"{10**k} * d{k}.n" for k in range(6))
        return f"(SELECT {lo} + {value} AS seq FROM {digits} HAVING seq <= {hi}) AS numbers"


def build(settings: Settings, rows: int, due: int, batch: int, console: Console) -> bool:
    """Make bench_scan_<rows> hold `rows` rows, exactly `due` of them due; False when reused."""
    table = scan_table(rows)
    comment = f"duecast bench scan table: rows={rows} due={due}"
    conn, cur = _cursor(settings)
    try:
        found = _scalar(
            cur,
            "SELECT TABLE_COMMENT FROM information_schema.TABLES "
            "WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = %s",
            (table,),
        )
        if found == comment:
            return False
        t = quote(table)
        cur.execute(f"DROP TABLE IF EXISTS {t}")
        cur.execute(
            f"CREATE TABLE {t} (user_id BIGINT NOT NULL PRIMARY KEY, status INT NOT NULL DEFAULT 1, "
            "updated_time DATETIME(6) NOT NULL) ENGINE=InnoDB"
        )
        # duecast's own migration adds dc_state, dc_attempt, dc_dispatched_at and dc_due; on the
        # empty table, so the index is then filled in (state, due, id) order as rows arrive.
        only = settings.model_copy(
            update={"sources": [scan_source(rows, batch)], "jobs": JobsSettings(enabled=False)}
        )
        migrate.apply(only)
        started = time.monotonic()
        _fill(conn, cur, rows, due, console)
        cur.execute(f"ANALYZE TABLE {t}")
        cur.fetchall()
        # The comment marks a finished build: a table left half-built by Ctrl-C is rebuilt.
        cur.execute(f"ALTER TABLE {t} COMMENT = %s", (comment,))
        console.print(f"built {table}: {rows:,} rows in {time.monotonic() - started:.0f} s")
        return True
    finally:
        conn.close()


def _fill(
    conn: pymysql.Connection[pymysql.cursors.Cursor],
    cur: pymysql.cursors.Cursor,
    rows: int,
    due: int,
    console: Console,
) -> None:
    """INSERT ... SELECT in chunks of CHUNK rows, one commit each, with a progress bar."""
    table, stride = scan_table(rows), rows // due
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.completed:,}/{task.total:,} rows"),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=console,
        transient=True,
    ) as bar:
        task = bar.add_task(f"building {table}", total=rows)
        for lo in range(1, rows + 1, CHUNK):
            hi = min(rows, lo + CHUNK - 1)
            # Every stride-th id (the first `due` of them) is due; the rest were checked just now.
            # Both kinds get updated_time rising with the id, so dc_due grows at its two ends.
            cur.execute(
                f"INSERT INTO {quote(table)} (user_id, status, updated_time) SELECT seq, 1, "
                f"IF(seq % {stride} = 0 AND seq DIV {stride} <= {due}, "
                f"TIMESTAMP'{OLD_BASE}' + INTERVAL seq SECOND, "
                f"NOW(6) - INTERVAL ({rows} - seq) MICROSECOND) FROM {_numbers(cur, lo, hi)}"
            )
            conn.commit()
            bar.update(task, completed=hi)


def drop_tables(settings: Settings, console: Console) -> None:
    conn, cur = _cursor(settings)
    try:
        cur.execute(
            "SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() "
            "AND TABLE_NAME LIKE %s",
            (TABLE_PREFIX.replace("_", "\\_") + "%",),
        )
        for (name,) in cur.fetchall():
            cur.execute(f"DROP TABLE {quote(str(name))}")
            console.print(f"dropped {name}")
    finally:
        conn.close()


def handler_reads(cur: pymysql.cursors.Cursor) -> int:
    """Rows (index entries or records) this session's handlers have read so far."""
    cur.execute("SHOW SESSION STATUS LIKE 'Handler\\_read\\_%'")
    return sum(int(v) for k, v in cur.fetchall() if k != "Handler_read_rnd_deleted")


def explain(cur: pymysql.cursors.Cursor, sql: SourceSQL, params: tuple[int, int]) -> dict[str, Any]:
    cur.execute("EXPLAIN " + sql.claim_due, params)
    names = [d[0] for d in cur.description or ()]
    plan = dict(zip(names, cur.fetchone() or (), strict=False))
    rows = plan.get("rows")
    return {
        "type": plan.get("type"),
        "key": plan.get("key"),
        "rows": int(rows) if rows is not None else None,  # MariaDB returns it as text
        "extra": plan.get("Extra"),
    }


@dataclass(frozen=True)
class Claim:
    select_ms: float  # claim_due: the SELECT ... FOR UPDATE SKIP LOCKED and its fetch
    claim_ms: float  # that plus mark_dispatched (the UPDATE); without the ROLLBACK
    rows_read: int  # index entries and records the server read for the SELECT
    claimed: int


def one_claim(
    conn: pymysql.Connection[pymysql.cursors.Cursor],
    sql: SourceSQL,
    params: tuple[int, int],
    overhead: int,
) -> Claim:
    """SourceStore.claim_due's two statements, timed, then rolled back so nothing changes."""
    with conn.cursor() as cur:
        before = handler_reads(cur)
        t0 = time.perf_counter()
        cur.execute(sql.claim_due, params)
        found = cur.fetchall()
        select_s = time.perf_counter() - t0
        read = handler_reads(cur) - before - overhead
        t1 = time.perf_counter()
        if found:
            cur.execute(sql.mark_dispatched.format(ids=in_list(sql.id_column, (r[0] for r in found))))
        update_s = time.perf_counter() - t1
    conn.rollback()  # every claim sees the same due rows
    return Claim(select_s * 1000, (select_s + update_s) * 1000, read, len(found))


def time_claims(settings: Settings, sizes: list[int], args: argparse.Namespace) -> list[dict[str, Any]]:
    """Claim, measure, roll back: the tables in turn, so noise on the machine hits every size alike."""
    conn, cur = _cursor(settings)
    sqls = {rows: render(scan_source(rows, args.batch)) for rows in sizes}
    claims: dict[int, list[Claim]] = {rows: [] for rows in sizes}
    facts: dict[int, dict[str, Any]] = {}
    try:
        period_us = int(_scalar(cur, "SELECT TIMESTAMPDIFF(MICROSECOND, %s, NOW(6))", (CUT,)))
        params = (period_us, args.batch)
        overhead = -handler_reads(cur) + handler_reads(cur)  # what SHOW STATUS itself reads
        for rows in sizes:
            due = _scalar(
                cur,
                f"SELECT COUNT(*) FROM {quote(scan_table(rows))} FORCE INDEX (dc_due) "
                "WHERE dc_state = 0 AND updated_time <= %s",
                (CUT,),
            )
            facts[rows] = {"rows": rows, "due": int(due), "explain": explain(cur, sqls[rows], params)}
        conn.rollback()
        for i in range(args.warmup_claims + args.claims):
            for rows in sizes:
                claim = one_claim(conn, sqls[rows], params, overhead)
                if i >= args.warmup_claims:
                    claims[rows].append(claim)
    finally:
        conn.close()
    return [summarise_claims(facts[rows], claims[rows]) for rows in sizes]


def summarise_claims(facts: dict[str, Any], claims: list[Claim]) -> dict[str, Any]:
    select = sorted(c.select_ms for c in claims)
    claim = sorted(c.claim_ms for c in claims)
    return facts | {
        "claimed_per_claim": sorted({c.claimed for c in claims}),
        "select_ms": {"median": statistics.median(select), "p99": harness.quantile(select, 0.99)},
        "claim_ms": {"median": statistics.median(claim), "p99": harness.quantile(claim, 0.99)},
        "rows_read_median": statistics.median(c.rows_read for c in claims),
        "samples_select_ms": [c.select_ms for c in claims],
    }


def scan_part(settings: Settings, args: argparse.Namespace, console: Console) -> list[dict[str, Any]]:
    for rows in args.sizes:
        if not build(settings, rows, args.due, args.batch, console):
            console.print(f"reusing {scan_table(rows)} ({rows:,} rows, {args.due:,} due)")
    console.rule(f"{args.claims} claims of {args.batch:,} per table (+{args.warmup_claims} warm-up)")
    return time_claims(settings, args.sizes, args)


def throughput_part(args: argparse.Namespace, console: Console) -> list[dict[str, Any]]:
    settings = demo.demo_settings(load_settings(), args.period, args.batch, args.mode)
    run_args = argparse.Namespace(
        users=args.users, seconds=args.seconds, period=args.period, warmup=args.warmup
    )
    results = []
    for workers in args.workers:
        console.rule(f"{args.mode} mode, {args.users:,} users, {workers} worker(s), {args.seconds:g} s")
        run = rescan.one_run(settings, run_args, workers, console)
        console.print(f"{run['checks_per_s']:,.0f} checks/s")
        # A re-scan never needs more than users / period checks/s: near that, the run measured
        # demand, not capacity (shorten --period or add --users to find the ceiling).
        capped = run["checks_per_s"] >= DEMAND_CAPPED * args.users / args.period
        results.append({"workers": workers, "demand_capped": capped, **run})
    return results
