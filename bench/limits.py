"""Benchmark: fleet-wide limits on the user_block_status re-scan (docs/protecting.md, "Fleet-wide
limits"). Three cases per mode, the demo's real processes each time (one dispatcher, --workers
workers, every user due at the start):

- `none`: no limit, the baseline;
- `idle`: a rate_limit_per_s far above what the run can reach, the cost of a limit that never binds
  (a reserve, and sometimes a settle, transaction around each claim);
- `binding`: rate_limit_per_s = --rate: the checks per second in every 1-s window, which should stay
  at or under 1.05 x --rate, and the period the limit allows, as `duecast status` shows it.

The checks are counted where they run, per wall-clock second (bench/pace_app.py, as in rescan.py).

    scripts/dev shell python bench/limits.py --users 100000 --rate 5000 --seconds 30
    scripts/dev shell python bench/limits.py --users 1000000 --rate 20000 --workers 3 6 --runs 3

The cost of a limit that never binds, in same-run pairs (no limit, then the idle limit, the order
alternating between runs) from a steady start rather than all due, so that the catch-up of a table
all due does not decide: the median of the pairs' ratios of checks/s and of CPU per check (every
role and MariaDB):

    scripts/dev shell python bench/limits.py --users 1000000 --compare-idle --start spread --runs 3

The jobs drain with and without a limit that does not bind: bench/jobs.py --compare-limit 10000000.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from functools import partial
from pathlib import Path
from typing import Any

import harness
import rescan
from limits_compare import IDLE_RATE, compare_idle, pairs_table
from rich.console import Console
from rich.table import Table

from duecast.cli.demo import run as demo
from duecast.shared.settings import Settings, load_settings
from duecast.shared.storage.db import Database
from duecast.shared.storage.limits import read_limits


def limited(settings: Settings, rate: float | None) -> Settings:
    src = settings.sources[0].model_copy(update={"rate_limit_per_s": rate})
    return settings.model_copy(update={"sources": [src]})


def one_run(settings: Settings, args: argparse.Namespace, workers: int, console: Console) -> dict[str, Any]:
    noted: dict[str, Any] = {}

    def before_stop() -> None:
        db = Database(settings.mysql)
        try:
            states = read_limits(db, settings.dispatcher.limits_table, settings.sources)
        finally:
            db.close()
        noted["allowed_period_s"] = states[0].allowed_period_s if states else None

    db_pid = rescan.mariadb_pid()
    db_before = rescan.cpu_seconds(db_pid) if db_pid else 0.0
    counted = rescan.counted_run(
        settings,
        args.users,
        workers,
        args.seconds,
        console=console,
        before_stop=before_stop,
        all_due=args.start == "due",
    )
    run = counted.run
    cpu_s = sum(run.cpu_s.values()) + ((rescan.cpu_seconds(db_pid) - db_before) if db_pid else 0.0)
    series = counted.series()
    p1, p50, p99, _ = counted.windows(args.warmup)
    return {
        "checks_per_s": run.mean_rate(skip_s=args.warmup),
        "series": series,
        "windows_p1": p1,
        "windows_p50": p50,
        "windows_p99": p99,
        "windows_max": max(series, default=0),
        "dispatcher_cores": run.cpu_s.get("dispatcher", 0.0) / args.seconds,
        "allowed_period_s": noted.get("allowed_period_s"),
        "cpu_per_check_us": cpu_s / max(1, sum(series)) * 1e6,
    }


def case_run(
    settings: Settings, args: argparse.Namespace, workers: int, console: Console, rate: float | None
) -> dict[str, Any]:
    return one_run(limited(settings, rate), args, workers, console)


def cases(args: argparse.Namespace) -> list[tuple[str, float | None]]:
    return [("none", None), ("idle", IDLE_RATE), ("binding", args.rate)]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--users", type=int, default=100_000)
    p.add_argument("--period", type=float, default=10.0)
    p.add_argument("--rate", type=float, default=5000.0, help="rate_limit_per_s of the binding case")
    p.add_argument("--seconds", type=float, default=30.0)
    p.add_argument("--warmup", type=float, default=5.0, help="seconds left out of checks/s and the windows")
    p.add_argument("--workers", type=int, nargs="+", default=[3])
    p.add_argument("--modes", nargs="+", choices=["rows", "ranges"], default=["ranges"])
    p.add_argument("--runs", type=int, default=1)
    p.add_argument("--json", type=Path)
    p.add_argument(
        "--start", choices=["due", "spread"], default="due", help="every user due, or the demo's spread"
    )
    p.add_argument(
        "--compare-idle", action="store_true", help="only same-run pairs of no limit and one that never binds"
    )
    args = p.parse_args(argv)
    harness.use_bench_namespace()
    base = load_settings()
    harness.check_namespace(base)
    console = Console(stderr=True)
    results = []
    with harness.exclusive(base):
        for mode in args.modes:
            settings = demo.demo_settings(base, args.period, 2000, mode)
            for workers in args.workers:
                if args.compare_idle:
                    pairs = compare_idle(partial(case_run, settings, args, workers, console), args, console)
                    results.append({"mode": mode, "workers": workers, "case": "pairs", "pairs": pairs})
                    continue
                for case, rate in cases(args):
                    runs = []
                    for i in range(args.runs):
                        console.rule(f"{mode}, {workers} workers, limit {case}, run {i + 1}/{args.runs}")
                        runs.append(one_run(limited(settings, rate), args, workers, console))
                    results.append(
                        {"mode": mode, "workers": workers, "case": case, "rate": rate, "runs": runs}
                    )
    out = harness.report_console()
    if args.compare_idle:
        out.print(pairs_table(args, results))
        out.print(rescan.versions_line(base))
        if args.json:
            harness.write_json(args.json, {"args": vars(args), "results": results})
        return 0
    out.print(table(args, results))
    for r in results:
        if r["case"] == "binding":
            out.print(
                f"{r['mode']}, {r['workers']} workers, per-second checks under {args.rate:,.0f}/s "
                f"(run 1): {r['runs'][0]['series']}"
            )
    out.print(rescan.versions_line(base))
    if args.json:
        harness.write_json(args.json, {"args": vars(args), "results": results})
    return 0


def table(args: argparse.Namespace, results: list[dict[str, Any]]) -> Table:
    t = Table(
        title=f"limits: {args.users:,} users every {args.period:g} s "
        f"(asks {args.users / args.period:,.0f}/s), all due at the start, {args.seconds:g} s per run, "
        f"median of {args.runs}"
    )
    for col in (
        "mode",
        "workers",
        "limit",
        "checks/s",
        "1-s windows p1 / p50 / p99 / max",
        "dispatcher cores",
        "period allowed",
    ):
        t.add_column(col, justify="right")
    for r in results:
        runs = r["runs"]

        def med(key: str, runs: list[dict[str, Any]] = runs) -> float:
            return float(statistics.median(float(x[key]) for x in runs))

        label = {
            "none": "none",
            "idle": f"{IDLE_RATE:,.0f}/s (never binds)",
            "binding": f"{args.rate:,.0f}/s",
        }
        periods = [x["allowed_period_s"] for x in runs if x["allowed_period_s"] is not None]
        t.add_row(
            r["mode"],
            str(r["workers"]),
            label[r["case"]],
            f"{med('checks_per_s'):,.0f}",
            " / ".join(f"{med(k):,.0f}" for k in ("windows_p1", "windows_p50", "windows_p99", "windows_max")),
            f"{med('dispatcher_cores'):.2f}",
            f"{statistics.median(periods):.1f} s" if periods else "-",
        )
    return t


if __name__ == "__main__":
    sys.exit(main())
