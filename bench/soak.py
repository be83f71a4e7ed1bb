"""Benchmark: does memory stay flat over a long run? (target: no growth after warm-up)

Runs the demo's re-scan (cli/demo/run.py's table, handler and settings: one dispatcher and
--workers workers as real processes on --users users) for --seconds, and every --interval seconds
reads each process's resident memory (VmRSS in /proc/<pid>/status) and the acked counter. Reports
per process the RSS at the start (the first sample after --warmup), the middle and the end, its
peak (VmHWM), and the slope of a least-squares line through the samples after warm-up, in MB per
10 minutes. A slope from a run shorter than a few minutes is mostly noise.

    scripts/dev shell python bench/soak.py                        # 600 s, 1M users, ranges mode
    scripts/dev shell python bench/soak.py --seconds 3600 --mode rows --chart soak.png

Runs in database duecast_bench / key prefix duecast-bench (see bench/harness.py). Ctrl-C ends the
run early and still reports.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import harness
import rescan
from rich.console import Console
from rich.live import Live
from rich.progress import Progress
from rich.table import Table

from duecast.cli.demo import run as demo
from duecast.cli.demo.fleet import Fleet
from duecast.shared.fanout.queue import ReadyQueue
from duecast.shared.process.loop import stop_on_signals
from duecast.shared.process.runtime import build_queue, build_stores
from duecast.shared.settings import Settings, load_settings
from duecast.shared.storage.admin import demo_table as demo_data
from duecast.shared.storage.admin import migrate

FLAT_MB_PER_10_MIN = 2.0  # |slope| at or below this counts as flat
MB = 1024.0  # /proc reports kB


@dataclass(frozen=True)
class Sample:
    t_s: float  # since the processes started
    rss_kb: dict[str, int]  # per live process
    acked: int


def memory_kb(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM (peak) of a process in kB; empty if it is gone."""
    try:
        lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    except OSError:
        return {}
    fields = (line.split() for line in lines if line.startswith(("VmRSS:", "VmHWM:")))
    return {f[0].rstrip(":"): int(f[1]) for f in fields}


def start_fleet(settings: Settings, args: argparse.Namespace, console: Console) -> tuple[Fleet, Path]:
    """What the demo (duecast.cli.demo.run) does before watching: table, migration, clean keys, processes."""
    src = settings.sources[0]
    with Progress(console=console, transient=True) as bar:
        task = bar.add_task(f"preparing {args.users:,} users", total=args.users)
        built = demo_data.prepare(settings.mysql, args.users, src.period_s, lambda n: bar.advance(task, n))
    console.print(f"table {demo_data.TABLE}: {args.users:,} users ({'built' if built else 'reused'})")
    migrate.apply(settings)
    build_stores(settings, settings.sources)[0].reset_dispatched()
    harness.clear_keys(settings, [src.name])
    logs = Path(tempfile.mkdtemp(prefix="duecast-soak-"))
    config = logs / "soak.toml"
    demo.write_config(settings, config, args.concurrency)
    fleet = Fleet(config, demo.APP, logs)
    fleet.start_dispatcher()
    for i in range(args.workers):
        fleet.start_worker(f"worker-{i + 1}")
    return fleet, logs


def watch(
    fleet: Fleet, queue: ReadyQueue, source: str, args: argparse.Namespace, console: Console
) -> list[Sample]:
    """Sample every --interval s until --seconds, Ctrl-C, or a process dies."""
    stop = threading.Event()
    stop_on_signals(stop)
    samples: list[Sample] = []
    began = time.monotonic()
    with Live(console=console, refresh_per_second=1, transient=True) as live:
        while True:
            rss = {n: memory_kb(p.pid).get("VmRSS", 0) for n, p in fleet.procs.items() if p.poll() is None}
            samples.append(Sample(time.monotonic() - began, rss, queue.stats(source).get("acked", 0)))
            live.update(live_view(samples, args))
            left = args.seconds - samples[-1].t_s
            if left <= 0 or len(fleet.alive()) < len(fleet.procs):
                return samples
            if stop.wait(min(args.interval, left)):
                return samples  # Ctrl-C: the children are stopping too; report what was sampled


def live_view(samples: list[Sample], args: argparse.Namespace) -> Table:
    last = samples[-1]
    t = Table(title=f"soak: {last.t_s:.0f} of {args.seconds:g} s", show_header=False)
    t.add_column("what")
    t.add_column("value", justify="right")
    if len(samples) > 1:
        prev = samples[-2]
        t.add_row("checks/s (last interval)", f"{(last.acked - prev.acked) / (last.t_s - prev.t_s):,.0f}")
    for name, kb in last.rss_kb.items():
        t.add_row(f"{name} RSS", f"{kb / MB:.1f} MB")
    return t


def analyse(samples: list[Sample], peaks_kb: dict[str, int], args: argparse.Namespace) -> dict[str, Any]:
    steady = [s for s in samples if s.t_s >= args.warmup] or samples[-1:]
    names = list(samples[0].rss_kb)
    procs = {}
    for name in names:
        points = [(s.t_s, s.rss_kb[name] / MB) for s in steady if name in s.rss_kb]
        if not points:
            continue
        first, last = points[0], points[-1]
        middle = min(points, key=lambda p: abs(p[0] - (first[0] + last[0]) / 2))
        slope = (
            statistics.linear_regression([p[0] for p in points], [p[1] for p in points]).slope * 600
            if len(points) > 2
            else float("nan")
        )
        procs[name] = {
            "start_mb": first[1],
            "middle_mb": middle[1],
            "end_mb": last[1],
            "peak_mb": peaks_kb.get(name, 0) / MB,
            "slope_mb_per_10_min": slope,
            "flat": abs(slope) <= FLAT_MB_PER_10_MIN,
            "samples_after_warmup": len(points),
        }
    a, b = steady[0], steady[-1]
    return {
        "processes": procs,
        "checks_per_s": (b.acked - a.acked) / (b.t_s - a.t_s) if b.t_s > a.t_s else 0.0,
        "measured_from_s": a.t_s,
        "measured_to_s": b.t_s,
        "series": [{"t_s": s.t_s, "rss_mb": {n: kb / MB for n, kb in s.rss_kb.items()}} for s in samples],
    }


def report(args: argparse.Namespace, result: dict[str, Any]) -> Table:
    t = Table(
        title=f"soak: {args.mode} mode, {args.users:,} users every {args.period:g} s, {args.workers} "
        f"worker(s); RSS from {result['measured_from_s']:.0f} s (after {args.warmup:g} s warm-up) to "
        f"{result['measured_to_s']:.0f} s; {result['checks_per_s']:,.0f} checks/s over that time"
    )
    for col in (
        "process",
        "start",
        "middle",
        "end",
        "peak",
        "slope (MB / 10 min)",
        f"flat (≤ {FLAT_MB_PER_10_MIN:g})",
    ):
        t.add_column(col, justify="right")
    for name, p in result["processes"].items():
        t.add_row(
            name,
            *(f"{p[k]:.1f} MB" for k in ("start_mb", "middle_mb", "end_mb", "peak_mb")),
            f"{p['slope_mb_per_10_min']:+.2f}",
            "yes" if p["flat"] else "NO",
        )
    return t


def chart(plt: Any, args: argparse.Namespace, result: dict[str, Any], machine: str) -> None:
    fig, ax = plt.subplots(figsize=(10, 5))
    series = result["series"]
    for name in result["processes"]:
        points = [(s["t_s"] / 60, s["rss_mb"][name]) for s in series if name in s["rss_mb"]]
        ax.plot([p[0] for p in points], [p[1] for p in points], marker=".", label=name)
    ax.axvline(args.warmup / 60, color="grey", linestyle="--", linewidth=1, label="end of warm-up")
    ax.set_xlabel("minutes")
    ax.set_ylabel("RSS (MB)")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend()
    ax.set_title(
        f"duecast soak: {args.mode} mode, {args.users:,} users, {result['checks_per_s']:,.0f} checks/s\n"
        f"{machine}",
        fontsize=10,
    )
    harness.save_chart(plt, fig, args.chart)


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=float, default=600.0, help="run time")
    parser.add_argument("--users", type=int, default=1_000_000)
    parser.add_argument("--mode", choices=["rows", "ranges"], default="ranges")
    parser.add_argument("--workers", type=int, default=3, help="worker processes")
    parser.add_argument("--concurrency", type=int, default=1, help="handler threads per worker")
    parser.add_argument("--period", type=float, default=10.0, help="re-check period in seconds")
    parser.add_argument("--batch", type=int, default=2000, help="rows per claim and per pop")
    parser.add_argument("--interval", type=float, default=10.0, help="seconds between samples")
    parser.add_argument("--warmup", type=float, default=30.0, help="seconds before the start sample")
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.add_argument("--chart", type=Path, help="also draw a PNG here (needs matplotlib)")
    args = parser.parse_args(argv)
    if args.users < 1 or args.workers < 1 or args.interval <= 0 or args.warmup >= args.seconds:
        parser.error("--users, --workers >= 1, --interval > 0 and --warmup < --seconds")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    harness.use_bench_namespace()
    settings = demo.demo_settings(load_settings(), args.period, args.batch, args.mode)
    harness.check_namespace(settings)
    plt = harness.chart_backend(args.chart)
    console = Console(stderr=True)
    with harness.exclusive(settings):
        fleet, logs = start_fleet(settings, args, console)
        try:
            samples = watch(fleet, build_queue(settings), settings.sources[0].name, args, console)
            peaks = {n: memory_kb(p.pid).get("VmHWM", 0) for n, p in fleet.procs.items()}
        finally:
            codes = fleet.stop()
    died = len(samples[-1].rss_kb) < len(fleet.procs) or any(codes.values())
    if died:
        console.print(f"[red]a process exited early or failed[/red]: {codes}; logs kept in {logs}")
    else:
        shutil.rmtree(logs, ignore_errors=True)
    result = analyse(samples, peaks, args)
    out = harness.report_console()
    out.print(report(args, result))
    machine = rescan.versions_line(settings)
    out.print(machine)
    if args.json:
        harness.write_json(args.json, {"args": vars(args), "machine": machine, "exit_codes": codes, **result})
    if plt is not None:
        chart(plt, args, result, machine)
    return 1 if died else 0


if __name__ == "__main__":
    sys.exit(main())
