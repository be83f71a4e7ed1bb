"""Benchmark: the re-scan when each check waits on I/O (20 ms), with async handlers and with threads.

Range mode, --users users re-checked every --period s, one dispatcher and --workers worker
processes, one run per handler (bench/io_checks/io_rescan_app.py) and --runs each:

- async:        an `async def` row handler awaiting asyncio.sleep(0.02)
- async-slow:   the same, but id % 100 == 7 takes 2 s and id % 1000 == 3 hangs until the source's
                timeout_s (--timeout, 5 s) cancels it
- threads:      a plain row handler, time.sleep(0.02), worker.concurrency = --concurrency (256)
- threads-slow: the plain handler with the slow and hung users (hung: a 60 s sleep); not by default

Each finished check stamps its user in a shared file, so freshness is measured per user: the share
of users whose last check ended at most period + 1 s ago (2 s users: period + 3 s; hung users, whose
attempt ends at the timeout: period + timeout + 1 s) when the run ends; and is counted in its
wall-clock second where it ran, for the pace: p1 / median / p99 and the least and most of the 1-s
windows of checks ended after --settle seconds, against users/period. Prints medians of --runs.

    scripts/dev shell python bench/io_checks/io_rescan.py --runs 3 --json bench/results/io-rescan.json
    scripts/dev shell python bench/io_checks/io_rescan.py --quick      # < 60 s: does it work?

Runs in database duecast_bench / key prefix duecast-bench (see bench/harness.py).
"""

from __future__ import annotations

import argparse
import math
import shutil
import statistics
import sys
import tempfile
import time
from array import array
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(1, str(Path(__file__).resolve().parent.parent))  # bench/: harness.py, rescan.py

import fleet
import harness
import rescan
from io_rescan_app import PACE_ENV, SLOW_S, STAMPS_ENV, hangs, is_slow
from rich.console import Console
from rich.table import Table

from duecast.cli.demo import run as demo
from duecast.shared.settings import Settings, load_settings


@dataclass(frozen=True)
class Handler:
    label: str
    app: str  # registry in io_rescan_app.py
    slow: bool  # has the slow and hung users
    threads: bool  # a plain function on worker.concurrency threads


HANDLERS = {
    "async": Handler("async def, await asyncio.sleep(0.02)", "io_rescan_app:async_fast", False, False),
    "async-slow": Handler("async def; 1% take 2 s, 0.1% hang", "io_rescan_app:async_slow", True, False),
    "threads": Handler("plain, time.sleep(0.02), threads", "io_rescan_app:threads", False, True),
    "threads-slow": Handler("plain; 1% take 2 s, 0.1% hang", "io_rescan_app:threads_slow", True, True),
}
QUICK = {"users": 20_000, "seconds": 12.0, "period": 5.0, "warmup": 6.0, "settle": 6.0, "runs": 1}


@dataclass
class Freshness:
    """Per user class: (users, checked within the class's bound), and the age of the normal users."""

    counts: dict[str, tuple[int, int]] = field(default_factory=dict)
    ages: list[float] = field(default_factory=list)


def freshness(stamps: Path, users: int, bounds: dict[str, float], slow: bool) -> Freshness:
    """Read the stamp file now: how many users of each class had a check end within its bound."""
    slots = array("d", stamps.read_bytes())
    now = time.time()
    out = Freshness()
    tally = {k: [0, 0] for k in ("all", "normal", "slow", "hung")}
    for user_id in range(1, users + 1):
        age = now - slots[user_id]
        kind = "hung" if slow and hangs(user_id) else "slow" if slow and is_slow(user_id) else "normal"
        tally[kind][0] += 1
        tally[kind][1] += age <= bounds[kind]
        tally["all"][0] += 1
        tally["all"][1] += age <= bounds["normal"]
        if kind == "normal":
            out.ages.append(age)
    out.counts = {k: (n, ok) for k, (n, ok) in tally.items() if n}
    out.ages.sort()
    return out


def one_run(settings: Settings, args: argparse.Namespace, name: str, console: Console) -> dict[str, Any]:
    handler = HANDLERS[name]
    stamps = Path(tempfile.mkdtemp(prefix="duecast-bench-stamps-")) / "stamps"
    pace_dir = stamps.parent / "pace"
    pace_dir.mkdir()
    stamps.write_bytes(bytes(8 * (args.users + 1)))  # every user: never checked (time 0)
    bounds = {
        "normal": args.period + 1.0,
        "slow": args.period + 1.0 + SLOW_S,
        "hung": args.period + 1.0 + args.timeout,
    }
    measured: dict[str, Freshness] = {}
    source = {"timeout_s": args.timeout} if handler.slow else {}
    worker: dict[str, float | int | str] = {"concurrency": args.concurrency} if handler.threads else {}
    if args.max_in_flight and not handler.threads:
        worker["max_in_flight"] = args.max_in_flight
    setup = fleet.Setup(
        args.users,
        args.period,
        args.workers,
        args.seconds,
        handler.app,
        source,
        worker,
        {STAMPS_ENV: str(stamps), PACE_ENV: str(pace_dir)},
    )
    db_pid = rescan.mariadb_pid()
    watch = {"mariadb": db_pid} if db_pid else {}

    ended: list[float] = []

    def before_stop() -> None:
        ended.append(time.time())
        measured["f"] = freshness(stamps, args.users, bounds, handler.slow)

    out = fleet.run(settings, setup, console, watch, before_stop)
    per_second = Counter[int]()
    for tenth, n in rescan.read_counts(pace_dir).items():
        per_second[tenth // 10] += n
    shutil.rmtree(stamps.parent, ignore_errors=True)
    if failure := out.failure(errors_expected=handler.slow):
        return {"failure": failure}  # the other handlers' runs still count
    if note := out.shutdown_note():
        console.print(f"[yellow]{name}[/yellow]: {note}")
    if out.errors:  # the slow handlers' timed-out checks: counted, shown, not a failure
        console.print(f"{out.error_lines} error lines logged (timed-out checks?), first: {out.errors[:2]}")
    f = measured["f"]
    first = min(per_second, default=0) + math.ceil(args.settle)
    last = int(ended[0]) - 1 if ended else first  # the last whole second before the end-of-run reads
    windows = sorted(per_second.get(s, 0) for s in range(first, last + 1))
    return {
        "windows": {
            "p1": harness.quantile(windows, 0.01) if windows else 0.0,
            "p50": harness.quantile(windows, 0.50) if windows else 0.0,
            "p99": harness.quantile(windows, 0.99) if windows else 0.0,
            "min": windows[0] if windows else 0,
            "max": windows[-1] if windows else 0,
            "count": len(windows),
        },
        "checks_per_second": [per_second.get(s, 0) for s in range(min(per_second, default=0), last + 1)],
        "checks_per_s": out.rate(args.warmup),
        "failed_per_s": out.rate(args.warmup, "failed"),
        "shares": {k: ok / n for k, (n, ok) in f.counts.items()},
        "users": {k: n for k, (n, _) in f.counts.items()},
        "age_p50_s": harness.quantile(f.ages, 0.50),
        "age_p99_s": harness.quantile(f.ages, 0.99),
        "cores": {k: out.cores(args.warmup, k) for k in ("mariadb", "dispatcher", "worker")},
        "counters": out.ticks[-1].counters,
        "error_lines": out.error_lines,
        "logs": str(out.log_dir),
    }


def med(runs: list[dict[str, Any]], *path: str) -> float:
    def get(r: dict[str, Any]) -> float:
        for key in path:
            r = r[key]
        return float(r)  # type: ignore[arg-type]

    return float(statistics.median(get(r) for r in runs))


def table(args: argparse.Namespace, results: dict[str, list[dict[str, Any]]]) -> Table:
    p = args.period
    t = Table(
        title=f"re-scan, checks that wait on I/O: {args.users:,} users every {p:g} s, range mode, "
        f"{args.workers} workers, {args.seconds:g} s per run (median of {args.runs})"
    )
    cols = ("handler", "checks/s", "runs", "failed/s", f"all users ≤ {p + 1:g} s",
            f"2 s users ≤ {p + 1 + SLOW_S:g} s", f"hung users ≤ {p + 1 + args.timeout:g} s",
            "age p50 / p99 (others)", f"1-s windows after {args.settle:g} s: p1 / p50 / p99 (min-max)",
            "cores: MariaDB / dispatcher / workers")  # fmt: skip
    for col in cols:
        t.add_column(col, justify="left" if col == "handler" else "right")
    for name, all_runs in results.items():
        slow = HANDLERS[name].slow
        runs = [r for r in all_runs if "failure" not in r]
        if not runs:
            t.add_row(HANDLERS[name].label, "failed", all_runs[0]["failure"][:60], *[""] * (len(cols) - 3))
            continue

        def share(kind: str, runs: list[dict[str, Any]] = runs, slow: bool = slow) -> str:
            return f"{med(runs, 'shares', kind):.1%}" if slow or kind == "all" else "-"

        label = HANDLERS[name].label + (f" ({args.concurrency})" if HANDLERS[name].threads else "")
        t.add_row(
            label,
            f"{med(runs, 'checks_per_s'):,.0f}",
            ", ".join(f"{r['checks_per_s']:,.0f}" if "failure" not in r else "failed" for r in all_runs),
            f"{med(runs, 'failed_per_s'):,.1f}",
            share("all"),
            share("slow"),
            share("hung"),
            f"{med(runs, 'age_p50_s'):.1f} s / {med(runs, 'age_p99_s'):.1f} s",
            " / ".join(f"{med(runs, 'windows', q):,.0f}" for q in ("p1", "p50", "p99"))
            + f" ({min(r['windows']['min'] for r in runs):,}-{max(r['windows']['max'] for r in runs):,})",
            " / ".join(f"{med(runs, 'cores', k):.2f}" for k in ("mariadb", "dispatcher", "worker")),
        )
    return t


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument(
        "--handlers", nargs="+", choices=list(HANDLERS), default=["async", "async-slow", "threads"]
    )
    p.add_argument("--users", type=int, default=1_000_000)
    p.add_argument("--period", type=float, default=10.0)
    p.add_argument("--seconds", type=float, default=60.0)
    p.add_argument("--warmup", type=float, default=12.0, help="seconds left out of checks/s")
    p.add_argument("--settle", type=float, default=20.0, help="the 1-s windows counted start here")
    p.add_argument("--workers", type=int, default=3)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--timeout", type=float, default=5.0, help="the slow handlers' source timeout_s")
    p.add_argument("--concurrency", type=int, default=256, help="the thread handlers' worker.concurrency")
    p.add_argument(
        "--max-in-flight", type=int, help="the async handlers' worker.max_in_flight (default: its)"
    )
    p.add_argument("--quick", action="store_true", help=f"check that it works in < 60 s: {QUICK}")
    p.add_argument("--json", type=Path)
    args = p.parse_args(argv)
    if args.quick:
        vars(args).update(QUICK)
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    harness.use_bench_namespace()
    settings = demo.demo_settings(load_settings(), args.period, 2000, "ranges")
    harness.check_namespace(settings)
    console = Console(stderr=True)
    results: dict[str, list[dict[str, Any]]] = {name: [] for name in args.handlers}
    with harness.exclusive(settings):
        for i in range(args.runs):
            for name in args.handlers:
                console.rule(f"{name}, run {i + 1}/{args.runs}")
                results[name].append(one_run(settings, args, name, console))
                r = results[name][-1]
                if "failure" in r:
                    console.print(f"[red]{name}: run failed[/red]: {r['failure']}")
                else:
                    console.print(
                        f"{name}: {r['checks_per_s']:,.0f} checks/s, {r['shares']['all']:.1%} fresh"
                    )
    out = harness.report_console()
    out.print(table(args, results))
    out.print(
        f"targets: >= {100_000:,} checks/s, >= 99% of users checked within period + 1 s and every 1-s "
        f"window within ±10% of the demand "
        f"(demand here: {args.users / args.period:,.0f} checks/s); {rescan.versions_line(settings)}"
    )
    if args.json:
        harness.write_json(args.json, {"args": vars(args), "results": results})
    return 0


if __name__ == "__main__":
    sys.exit(main())
