"""Benchmark: end-to-end checks/s of the user_block_status re-scan (due -> dispatched -> handled -> acked).

Runs the demo's real processes (one dispatcher, N workers) against a table of --users rows that is
re-checked every --period seconds, several times, and prints a table with the median run.
Usage: scripts/dev shell python bench/rescan.py --users 1000000 --seconds 60 --runs 3
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
from pathlib import Path

from rich.console import Console
from rich.table import Table

from duecast import demo
from shared.db import connect
from shared.settings import load_settings


def server_versions() -> dict[str, str]:
    settings = load_settings()
    conn = connect(settings.mysql, database=False)
    with conn.cursor() as cur:
        cur.execute("SELECT VERSION()")
        row = cur.fetchone()
    conn.close()
    try:
        redis_v = subprocess.run(
            ["redis-server", "--version"], capture_output=True, text=True, check=False
        ).stdout.split()[2]
    except (OSError, IndexError):
        redis_v = "?"
    return {
        "mariadb": str(row[0]) if row else "?",
        "redis": redis_v.removeprefix("v="),
        "python": platform.python_version(),
        "cpus": str(os.cpu_count()),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--users", type=int, default=1_000_000)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--workers", type=int, nargs="+", default=[3], help="worker process counts to try")
    parser.add_argument("--period", type=float, default=10.0)
    parser.add_argument("--batch", type=int, default=2000)
    parser.add_argument("--warmup", type=float, default=5.0, help="seconds ignored at the start of a run")
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args(argv)

    console = Console(stderr=True)
    settings = demo.demo_settings(load_settings(), args.period, args.batch)
    results = []
    for workers in args.workers:
        rates = []
        for i in range(args.runs):
            console.rule(f"{workers} worker(s), run {i + 1}/{args.runs}")
            run = demo.run(settings, args.users, workers, args.seconds, console=console)
            if run.errors or any(run.exit_codes.values()):
                console.print(f"[red]run failed[/red]: {run.errors or run.exit_codes} (logs: {run.log_dir})")
                return 1
            rates.append(run.mean_rate(skip_s=args.warmup))
            console.print(f"run {i + 1}: {rates[-1]:,.0f} checks/s")
        results.append({"workers": workers, "runs": rates, "median": statistics.median(rates)})

    versions = server_versions()
    table = Table(title=f"re-scan: {args.users:,} users, period {args.period:g}s, {args.seconds:g}s per run")
    for col in ("worker processes", "runs (checks/s)", "median checks/s"):
        table.add_column(col, justify="right")
    for r in results:
        table.add_row(str(r["workers"]), ", ".join(f"{x:,.0f}" for x in r["runs"]), f"{r['median']:,.0f}")
    out = Console()
    out.print(table)
    out.print(
        f"machine: {versions['cpus']} CPUs; MariaDB {versions['mariadb']}, Redis {versions['redis']}, "
        f"Python {versions['python']}; batch {args.batch}"
    )
    if args.json:
        args.json.write_text(
            json.dumps(
                {"args": vars(args) | {"json": str(args.json)}, "versions": versions, "results": results},
                indent=2,
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
