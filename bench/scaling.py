"""Benchmark: does duecast's cost grow with the table? Two parts (`--parts scan throughput`):

(a) scan: the claim's cost at 1M vs 10M rows with the same number due (target: flat). Builds
    user_block_status-shaped tables bench_scan_<rows> (rows mode: migrated with the dc_* columns and
    the dc_due index), `--due` rows of each due and scattered evenly over the ids, every other row
    recent. Then it runs the claim of shared/queries/source.py (render(src).claim_due: SELECT ... FOR UPDATE
    SKIP LOCKED, then mark_dispatched) on each table in turn, rolled back every time so nothing
    changes, and reports median / p99 ms per claim, the EXPLAIN plan and the rows the server
    really read (Handler_read_* counters). The tables are kept for the next run (reused when their
    comment says they hold the right rows); `--drop` removes them.
    Due-ness: a due row's updated_time is in 2001, a recent one's is when it was built, and the
    claim's period is set so the boundary is 2010-01-01 (CUT). The kept tables so stay valid.
(b) throughput: checks/s of the user_block_status re-scan (bench/rescan.py's one_run: real
    dispatcher and workers) for each `--workers` count, one short run each.

    scripts/dev shell python bench/scaling.py                        # 1M vs 10M; 1-4 workers, ranges
    scripts/dev shell python bench/scaling.py --parts scan --sizes 100000 1000000 --due 10000
    scripts/dev shell python bench/scaling.py --drop                 # remove the scan tables

Runs in database duecast_bench / key prefix duecast-bench (see bench/harness.py).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import harness
import pymysql.cursors
import rescan
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table

from duecast.admin import migrate
from duecast.demo import run as demo
from duecast.shared.identifiers import quote
from duecast.shared.queries.source import SourceSQL, in_list, render
from duecast.shared.settings import JobsSettings, Settings, SourceSettings, load_settings
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


def scan_table_view(args: argparse.Namespace, results: list[dict[str, Any]]) -> Table:
    t = Table(
        title=f"claim cost vs table size: claim_due({args.batch:,}) then mark_dispatched, rolled back; "
        f"{args.claims} claims per table"
    )
    for col in (
        "rows",
        "due",
        "claimed",
        "SELECT median / p99",
        "SELECT + UPDATE median / p99",
        "rows read (actual)",
        "EXPLAIN type / key / rows",
        "vs smallest",
    ):
        t.add_column(col, justify="right")
    base = results[0]["select_ms"]["median"] if results else 1.0
    for r in results:
        s, c, e = r["select_ms"], r["claim_ms"], r["explain"]
        t.add_row(
            f"{r['rows']:,}",
            f"{r['due']:,}",
            "/".join(str(n) for n in r["claimed_per_claim"]),
            f"{s['median']:.2f} / {s['p99']:.2f} ms",
            f"{c['median']:.2f} / {c['p99']:.2f} ms",
            f"{r['rows_read_median']:,.0f}",
            f"{e['type']} / {e['key']} / {e['rows'] or 0:,}",
            f"{s['median'] / base:.2f}x",
        )
    return t


def throughput_table_view(args: argparse.Namespace, results: list[dict[str, Any]]) -> Table:
    t = Table(
        title=f"re-scan throughput vs worker processes: {args.mode} mode, {args.users:,} users every "
        f"{args.period:g} s (demand {args.users / args.period:,.0f}/s), {args.seconds:g} s per run "
        f"({args.warmup:g} s warm-up ignored); (demand): kept up with demand, so not a ceiling"
    )
    for col in (
        "workers",
        "checks/s",
        "per worker",
        "vs 1st",
        f"checked ≤ {args.period + 1:g} s",
        "cores: MariaDB / dispatcher / workers",
    ):
        t.add_column(col, justify="right")
    base = results[0]["checks_per_s"] if results else 1.0
    for r in results:
        cores = r["cores"]
        t.add_row(
            str(r["workers"]),
            f"{r['checks_per_s']:,.0f}" + (" (demand)" if r["demand_capped"] else ""),
            f"{r['checks_per_s'] / r['workers']:,.0f}",
            f"{r['checks_per_s'] / base:.2f}x" if base else "-",
            f"{r['fresh_share']:.1%}",
            f"{cores['mariadb']:.2f} / {cores['dispatcher']:.2f} / {cores['workers']:.2f}",
        )
    return t


def chart(plt: Any, args: argparse.Namespace, outcome: dict[str, Any], machine: str) -> None:
    parts = [p for p in ("scan", "throughput") if outcome.get(p)]
    fig, axes = plt.subplots(1, len(parts), figsize=(6.5 * len(parts), 5), squeeze=False)
    for ax, part in zip(axes[0], parts, strict=True):
        if part == "scan":
            scan = outcome["scan"]
            ax.boxplot([r["samples_select_ms"] for r in scan], showfliers=True)
            ax.set_xticks(range(1, len(scan) + 1), [f"{r['rows']:,} rows" for r in scan])
            ax.set_ylabel("ms per claim SELECT")
            ax.set_ylim(bottom=0)
            ax.set_title(f"claim of {args.batch:,} with {args.due:,} due: cost vs table size")
        else:
            runs = outcome["throughput"]
            workers = [r["workers"] for r in runs]
            rates = [r["checks_per_s"] for r in runs]
            ax.plot(workers, rates, "o-", label="measured")
            ax.plot(workers, [rates[0] * w / workers[0] for w in workers], ":", label="linear from first")
            ax.axhline(args.users / args.period, color="grey", linestyle="--", label="demand: users / period")
            ax.set_xticks(workers)
            ax.set_xlabel("worker processes")
            ax.set_ylabel("checks/s")
            ax.set_ylim(bottom=0)
            ax.set_title(f"{args.mode} mode, {args.users:,} users")
            ax.legend()
        ax.grid(alpha=0.3)
    fig.suptitle(f"duecast scaling\n{machine}", fontsize=10)
    harness.save_chart(plt, fig, args.chart)


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--parts", nargs="+", choices=["scan", "throughput"], default=["scan", "throughput"])
    scan = parser.add_argument_group("(a) scan")
    scan.add_argument("--sizes", type=int, nargs="+", default=[1_000_000, 10_000_000], help="table rows")
    scan.add_argument("--due", type=int, default=100_000, help="rows due in every table")
    scan.add_argument("--batch", type=int, default=2000, help="rows per claim (and per pop in (b))")
    scan.add_argument("--claims", type=int, default=300, help="measured claims per table")
    scan.add_argument("--warmup-claims", type=int, default=20, help="claims per table not measured")
    scan.add_argument("--drop", action="store_true", help="drop the bench_scan_* tables and exit")
    tput = parser.add_argument_group("(b) throughput")
    tput.add_argument("--mode", choices=["rows", "ranges"], default="ranges")
    tput.add_argument("--workers", type=int, nargs="+", default=[1, 2, 3, 4], help="worker counts")
    tput.add_argument("--users", type=int, default=1_000_000)
    tput.add_argument("--seconds", type=float, default=30.0, help="per worker count")
    tput.add_argument("--period", type=float, default=10.0)
    tput.add_argument("--warmup", type=float, default=10.0, help="seconds ignored at a run's start")
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.add_argument("--chart", type=Path, help="also draw a PNG here (needs matplotlib)")
    args = parser.parse_args(argv)
    if args.due < 1 or min(args.sizes) < args.due:
        parser.error("--due must be >= 1 and no table smaller than --due")
    if args.warmup >= args.seconds or min(args.workers) < 1:
        parser.error("--warmup must be shorter than --seconds, and --workers >= 1")
    args.sizes = sorted(set(args.sizes))
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    harness.use_bench_namespace()
    settings = load_settings()
    harness.check_namespace(settings)
    console = Console(stderr=True)
    with harness.exclusive(settings):
        if args.drop:
            drop_tables(settings, console)
            return 0
        plt = harness.chart_backend(args.chart)
        outcome: dict[str, Any] = {}
        if "scan" in args.parts:
            outcome["scan"] = scan_part(settings, args, console)
        if "throughput" in args.parts:
            outcome["throughput"] = throughput_part(args, console)
    out = harness.report_console()
    if "scan" in outcome:
        out.print(scan_table_view(args, outcome["scan"]))
    if "throughput" in outcome:
        out.print(throughput_table_view(args, outcome["throughput"]))
    machine = rescan.versions_line(settings)
    out.print(machine)
    if args.json:
        harness.write_json(args.json, {"args": vars(args), "machine": machine, **outcome})
    if plt is not None:
        chart(plt, args, outcome, machine)
    return 0


if __name__ == "__main__":
    sys.exit(main())
