"""Benchmark: end-to-end checks/s of the user_block_status re-scan (due -> dispatched -> handled -> acked).

Runs the demo's real processes (one dispatcher, N workers) against a table of --users rows that is
re-checked every --period seconds, in row mode and/or range mode, several times each, and prints
a table of medians: checks/s sustained, the share of users checked within period + 1 s, p50/p99
staleness at the end of the run, the CPU each process used, and how even the pace is: p1 / median
/ p99 of the 1-s windows of checks after --settle seconds, against users/period (counted where the
checks run: the workers' handler module is bench/pace_app.py, the demo's check counting the checks
of each wall-clock second), and the schedule itself at the end: the users due in each second of the
next period, read from MySQL (exact).

    scripts/dev shell python bench/rescan.py --users 1000000 --seconds 60 --runs 3

The even pace from the worst start, every user due at once (docs/benchmarks.md, "An even pace"):

    scripts/dev shell python bench/rescan.py --start due --modes ranges --users 1000000 --seconds 40
    scripts/dev shell python bench/rescan.py --start due --modes rows --users 200000 --seconds 40
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness import quantile, report_console
from rich.console import Console
from rich.table import Table

from duecast.cli.demo import run as demo
from duecast.cli.demo.fleet import cpu_seconds
from duecast.cli.demo.results import Run
from duecast.shared.process.runtime import build_queue
from duecast.shared.queries.ranges import ranges_table
from duecast.shared.settings import Settings, load_settings
from duecast.shared.storage.admin import demo_table as demo_data
from duecast.shared.storage.db import connect

BENCH_DIR = Path(__file__).resolve().parent


def mariadb_pid() -> int | None:
    out = subprocess.run(["pidof", "mariadbd", "mysqld"], capture_output=True, text=True, check=False)
    pids = out.stdout.split()
    return int(pids[0]) if pids else None


def staleness(settings: Settings) -> tuple[list[float], list[int]]:
    """Seconds since each user's last check, and each value's weight (rows it stands for)."""
    src = settings.sources[0]
    conn = connect(settings.mysql)
    try:
        with conn.cursor() as cur:
            if src.mode == "ranges":
                cur.execute(
                    f"SELECT TIMESTAMPDIFF(MICROSECOND, checked_at, NOW(6)), rows_seen "
                    f"FROM `{ranges_table(src)}` WHERE rows_seen > 0"
                )
                rows = cur.fetchall()
                return [r[0] / 1e6 for r in rows], [int(r[1]) for r in rows]
            cur.execute(f"SELECT TIMESTAMPDIFF(MICROSECOND, updated_time, NOW(6)) FROM {demo_data.TABLE}")
            ages = [r[0] / 1e6 for r in cur.fetchall()]
            return ages, [1] * len(ages)
    finally:
        conn.close()


def weighted_quantile(values: list[float], weights: list[int], q: float) -> float:
    pairs = sorted(zip(values, weights, strict=True))
    total = sum(weights)
    acc = 0
    for value, weight in pairs:
        acc += weight
        if acc >= q * total:
            return value
    return pairs[-1][0] if pairs else 0.0


@dataclass
class Counted:
    """A demo run, with the checks of each wall-clock second counted where they ran."""

    run: Run
    per_tenth: Counter[int]  # checks per tenth of a wall-clock second: int(time * 10)
    first: int  # the first second any check ran
    last: int  # the last whole second before the end-of-run reads

    @property
    def per_second(self) -> Counter[int]:
        seconds: Counter[int] = Counter()
        for tenth, n in self.per_tenth.items():
            seconds[tenth // 10] += n
        return seconds

    def windows(self, settle_s: float) -> tuple[float, float, float, int]:
        """p1 / median / p99 of the 1-s windows from settle_s after the first check, and their count."""
        return window_quantiles(self.per_second, self.first + math.ceil(settle_s), self.last)

    def series(self) -> list[int]:
        per_second = self.per_second
        return [per_second.get(s, 0) for s in range(self.first, self.last + 1)]

    def landing(self, settle_s: float) -> list[float]:
        """The share of the checks run in each tenth of their second (0.0-0.1 s past it first), over
        the windows counted: claims come on a 0.1 s grid, so a claim's checks that land near a second's
        edge move a whole claim between two windows."""
        first, tenths = self.first + math.ceil(settle_s), Counter[int]()
        for tenth, n in self.per_tenth.items():
            if first <= tenth // 10 <= self.last:
                tenths[tenth % 10] += n
        total = sum(tenths.values()) or 1
        return [tenths[t] / total for t in range(10)]


def counted_run(
    settings: Settings,
    users: int,
    workers: int,
    seconds: float,
    *,
    console: Console,
    before_stop: Callable[[], None] | None = None,
    all_due: bool,
) -> Counted:
    """demo.run with the workers' handler module bench/pace_app.py, which counts each second's checks."""
    ended: list[float] = []

    def reads() -> None:
        ended.append(time.time())
        if before_stop is not None:
            before_stop()

    pace_dir = Path(tempfile.mkdtemp(prefix="duecast-pace-"))
    path = os.pathsep.join(p for p in (str(BENCH_DIR), os.environ.get("PYTHONPATH")) if p)
    try:
        run = demo.run(
            settings,
            users,
            workers,
            seconds,
            console=console,
            before_stop=reads,
            all_due=all_due,
            app="pace_app",
            extra_env={"PYTHONPATH": path, "DUECAST_BENCH_PACE_DIR": str(pace_dir)},
        )
        per_tenth = read_counts(pace_dir)
    finally:
        shutil.rmtree(pace_dir, ignore_errors=True)
    if run.errors or any(run.exit_codes.values()):
        raise SystemExit(f"run failed: {run.errors or run.exit_codes} (logs: {run.log_dir})")
    first = min(per_tenth) // 10 if per_tenth else 0
    return Counted(run, per_tenth, first, int(ended[0]) - 1 if ended else first)


def one_run(settings: Settings, args: argparse.Namespace, workers: int, console: Console) -> dict[str, Any]:
    measured: dict[str, Any] = {}

    def before_stop() -> None:
        ages, weights = staleness(settings)
        total = sum(weights) or 1
        within = sum(w for a, w in zip(ages, weights, strict=True) if a <= args.period + 1.0)
        due = sorted(demo_data.due_per_second(settings.mysql, settings.sources[0]))
        measured.update(
            due_p0=due[0],
            due_p50=statistics.median(due),
            due_p100=due[-1],
            fresh_share=within / total,
            staleness_p50_s=weighted_quantile(ages, weights, 0.50),
            staleness_p99_s=weighted_quantile(ages, weights, 0.99),
        )

    db_pid = mariadb_pid()
    db_cpu_before = cpu_seconds(db_pid) if db_pid else 0.0
    counted = counted_run(
        settings,
        args.users,
        workers,
        args.seconds,
        console=console,
        before_stop=before_stop,
        all_due=args.start == "due",
    )
    run = counted.run
    db_cpu = (cpu_seconds(db_pid) - db_cpu_before) if db_pid else 0.0
    cores = {name: cpu / args.seconds for name, cpu in run.cpu_s.items()}
    p1, p50, p99, seconds = counted.windows(args.settle)
    a1, a50, a99 = run.window_quantiles(skip_s=args.settle) or (0.0, 0.0, 0.0)
    return measured | {
        "windows_p1": p1,
        "windows_p50": p50,
        "windows_p99": p99,
        "windows_counted": seconds,
        "checks_per_second": counted.series(),
        "checks_per_tenth": {str(k): v for k, v in sorted(counted.per_tenth.items())},
        "landing_per_tenth": counted.landing(args.settle),
        "acked_windows_p1_p50_p99": [a1, a50, a99],
        "checks_per_s": run.mean_rate(skip_s=args.warmup),
        "cores": {
            "mariadb": db_cpu / args.seconds,
            "dispatcher": cores.get("dispatcher", 0.0),
            "workers": sum(v for k, v in cores.items() if k.startswith("worker")),
        },
        "stale_acks": run.counter("stale_acks"),
        "redeliveries": run.counter("requeued"),
    }


def read_counts(folder: Path) -> Counter[int]:
    """Checks per tenth of a wall-clock second where they ran (bench/pace_app.py), summed over the
    workers."""
    total: Counter[int] = Counter()
    for path in folder.glob("*.json"):
        total.update({int(k): int(v) for k, v in json.loads(path.read_text())["tenths"].items()})
    return total


def window_quantiles(per_second: Counter[int], first: int, last: int) -> tuple[float, float, float, int]:
    """p1, median and p99 of the checks in each whole second from `first` to `last` (inclusive),
    and how many seconds that is; a second with no check counts as 0."""
    windows = sorted(float(per_second.get(s, 0)) for s in range(first, last + 1))
    if not windows:
        return 0.0, 0.0, 0.0, 0
    return quantile(windows, 0.01), quantile(windows, 0.5), quantile(windows, 0.99), len(windows)


def median_of(runs: list[dict[str, Any]], key: str) -> float:
    return float(statistics.median(float(r[key]) for r in runs))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--users", type=int, default=1_000_000)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--modes", nargs="+", choices=["rows", "ranges"], default=["rows", "ranges"])
    parser.add_argument("--workers", type=int, nargs="+", default=[3], help="worker process counts to try")
    parser.add_argument("--period", type=float, default=10.0)
    parser.add_argument("--batch", type=int, default=2000)
    parser.add_argument("--warmup", type=float, default=12.0, help="seconds ignored at the start of a run")
    parser.add_argument(
        "--start", choices=["spread", "due"], default="spread", help="last checks spread, or all due at once"
    )
    parser.add_argument("--settle", type=float, default=20.0, help="the 1-s windows counted start here")
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.add_argument("--chart", type=Path, help="also draw checks/s per mode and worker count (PNG)")
    args = parser.parse_args(argv)

    console = Console(stderr=True)
    results = []
    for mode in args.modes:
        settings = demo.demo_settings(load_settings(), args.period, args.batch, mode)
        for workers in args.workers:
            runs = []
            for i in range(args.runs):
                console.rule(f"{mode} mode, {workers} worker(s), run {i + 1}/{args.runs}")
                runs.append(one_run(settings, args, workers, console))
                console.print(f"run {i + 1}: {runs[-1]['checks_per_s']:,.0f} checks/s")
            results.append({"mode": mode, "workers": workers, "runs": runs})

    table = Table(
        title=f"re-scan: {args.users:,} users every {args.period:g} s, {args.seconds:g} s per run "
        f"(median of {args.runs})"
    )
    for col in (
        "mode",
        "workers",
        "checks/s",
        "runs",
        f"checked ≤ {args.period + 1:g} s",
        "staleness p50 / p99",
        f"1-s windows of checks run: p1 / p50 / p99 (target {args.users / args.period:,.0f})",
        "due per second: min / median / max",
        "cores: MariaDB / dispatcher / workers",
    ):
        table.add_column(col, justify="right")
    for r in results:
        runs = r["runs"]
        cores = {
            k: statistics.median(x["cores"][k] for x in runs) for k in ("mariadb", "dispatcher", "workers")
        }
        table.add_row(
            r["mode"],
            str(r["workers"]),
            f"{median_of(runs, 'checks_per_s'):,.0f}",
            ", ".join(f"{x['checks_per_s']:,.0f}" for x in runs),
            f"{median_of(runs, 'fresh_share'):.1%}",
            f"{median_of(runs, 'staleness_p50_s'):.1f} s / {median_of(runs, 'staleness_p99_s'):.1f} s",
            " / ".join(f"{median_of(runs, f'windows_{q}'):,.0f}" for q in ("p1", "p50", "p99")),
            " / ".join(f"{median_of(runs, f'due_{q}'):,.0f}" for q in ("p0", "p50", "p100")),
            f"{cores['mariadb']:.2f} / {cores['dispatcher']:.2f} / {cores['workers']:.2f}",
        )
    out = report_console()
    out.print(table)
    for r in results:
        shares = [statistics.median(x["landing_per_tenth"][t] for x in r["runs"]) for t in range(10)]
        out.print(
            f"{r['mode']}, {r['workers']} workers: share of the checks in each tenth of their second "
            f"(0.0-0.1 s first; 10% each if even): {' '.join(f'{v:.1%}' for v in shares)}"
        )
    versions = versions_line(settings)
    out.print(versions)
    if args.chart:
        chart(results, args, args.chart)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(
            json.dumps(
                {"args": {k: str(v) for k, v in vars(args).items()}, "machine": versions, "results": results},
                indent=2,
            )
        )
    return 0


def chart(results: list[dict[str, Any]], args: argparse.Namespace, path: Path) -> None:
    try:
        import matplotlib  # noqa: PLC0415 - a bench extra, not a duecast dependency

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt  # noqa: PLC0415
    except ImportError:
        print("no chart: install the bench extra (pip install -e '.[bench]')", file=sys.stderr)
        return
    labels = [f"{r['mode']}\n{r['workers']} worker(s)" for r in results]
    values = [median_of(r["runs"], "checks_per_s") for r in results]
    fig, ax = plt.subplots(figsize=(6, 3.5), dpi=120)
    bars = ax.bar(labels, values, color=["#8892b0" if r["mode"] == "rows" else "#2a9d8f" for r in results])
    ax.bar_label(bars, labels=[f"{v:,.0f}" for v in values])
    ax.axhline(args.users / args.period, color="#e76f51", linestyle="--", linewidth=1)
    ax.text(
        -0.4, args.users / args.period * 1.02, "demand: every user every period", color="#e76f51", fontsize=8
    )
    ax.set_ylabel("checks/s (median run)")
    ax.set_title(f"re-scan of {args.users:,} users every {args.period:g} s, 2-core machine", fontsize=10)
    ax.set_ylim(0, max([*values, args.users / args.period]) * 1.18)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)


def versions_line(settings: Settings) -> str:
    conn = connect(settings.mysql, database=False)
    with conn.cursor() as cur:
        cur.execute("SELECT VERSION()")
        row = cur.fetchone()
    conn.close()
    redis_info = build_queue(settings).client.info("server")
    return (
        f"machine: {os.cpu_count()} CPUs, {platform.machine()}; MariaDB {row[0] if row else '?'}; "
        f"Redis {redis_info.get('redis_version', '?')}; Python {platform.python_version()}"
    )


if __name__ == "__main__":
    sys.exit(main())
