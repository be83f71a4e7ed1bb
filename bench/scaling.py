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
import sys
from pathlib import Path
from typing import Any

import harness
import rescan
from rich.console import Console
from rich.table import Table
from scaling_parts import (
    drop_tables,
    scan_part,
    throughput_part,
)

from duecast.shared.settings import load_settings


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
