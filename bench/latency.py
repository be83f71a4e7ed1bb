"""Benchmark: enqueue -> start latency of one-off jobs at a steady rate (target: p99 <= 50 ms at 1,000/s).

Starts one dispatcher and --workers worker processes (handler module bench/latency_app.py), then
enqueues "stamp" jobs into duecast_jobs at --rate jobs/s for --seconds, and reads when each started.

- Load: open loop. Job i is due at start + i / rate; a producer that falls behind sends at once
  (it never skips), and both its achieved rate and how far behind it fell are reported. A result
  meets the target only if the producer kept within 5% of the asked rate.
- Batching: by default (`--batch-ms 10`) a producer sends every job due so far in one
  enqueue_many (one INSERT, one COMMIT, one wake-up) every 10 ms: 10 jobs per transaction at
  1,000 jobs/s. `--batch-ms 0` makes each job its own enqueue, as a web request enqueueing one job
  would; one connection then needs a COMMIT (a redo-log flush) per job, which a busy 2-core
  machine cannot do 1,000 times a second, so use `--producers N` threads (own connections) to
  reach the rate, at the cost of their CPU on the same machine.
- Enqueue time: time.time() just after COMMIT returns (before the wake-up), recorded by the
  producer: from then on the job exists, and that is when a caller's enqueue() could return.
  The payload carries t_sent, time.time() just before the INSERT; "p99 from call" is measured from
  there and includes the enqueue call itself.
- Start time: time.time() when the handler starts (bench/latency_app.py writes one line per run).

    scripts/dev shell python bench/latency.py                      # 1,000 jobs/s for 20 s
    scripts/dev shell python bench/latency.py --rates 100 1000 2000 --chart latency.png

Runs in database duecast_bench / key prefix duecast-bench (see bench/harness.py); it empties that
database's jobs table and the jobs keys of that prefix.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import harness
import rescan
from latency_parts import (
    Stamps,
    prepare,
    run_load,
    start_fleet,
    summarise,
    warm_up,
)
from rich.console import Console
from rich.table import Table

from duecast.shared.settings import Settings, load_settings


def run_all(settings: Settings, args: argparse.Namespace, console: Console) -> dict[str, Any]:
    logs = Path(tempfile.mkdtemp(prefix="duecast-latency-"))
    stamps = Stamps(logs / "stamps.txt")
    fleet = start_fleet(args, logs, stamps.path)
    results = []
    ok = False
    try:
        warm_up(settings, stamps, fleet, logs)
        first = 0
        for rate in args.rates:
            console.rule(f"{rate:,.0f} jobs/s for {args.seconds:g} s")
            load = run_load(settings, args, rate, first, console)
            missing = stamps.wait_for(load.ids, args.drain_timeout)
            results.append(summarise(load, stamps, missing, args.target_ms))
            r = results[-1]["latency_ms"]
            console.print(f"p50 {r['p50']:.1f} ms, p99 {r['p99']:.1f} ms, missing {missing}")
            first = load.ids.stop
            time.sleep(args.pause)
        ok = True
    finally:
        codes = fleet.stop()
        if ok and not any(codes.values()):
            shutil.rmtree(logs, ignore_errors=True)
        else:
            console.print(f"process exit codes {codes}; logs kept in {logs}")
    return {"results": results, "duplicates": stamps.duplicates, "runs_per_worker_pid": dict(stamps.pids)}


def table(args: argparse.Namespace, results: list[dict[str, Any]]) -> Table:
    how = (
        f"enqueue_many every {args.batch_ms:g} ms"
        if args.batch_ms
        else "one enqueue (INSERT, COMMIT, wake-up) per job"
    )
    t = Table(
        title=f"enqueue -> start latency: {args.workers} worker(s), {args.seconds:g} s per rate, {how}, "
        f"{args.producers} producer thread(s); from COMMIT returned to handler start"
    )
    for col in (
        "rate",
        "enqueued/s",
        "max lag",
        "started",
        "p50",
        "p90",
        "p99",
        "p99.9",
        "max",
        "p99 from call",
        f"p99 ≤ {args.target_ms:g} ms",
    ):
        t.add_column(col, justify="right")
    for r in results:
        lat = r["latency_ms"]
        started = f"{r['started']:,}" + (f" ({r['missing']:,} missing)" if r["missing"] else "")
        t.add_row(
            f"{r['rate']:,.0f}/s",
            f"{r['enqueue_per_s']:,.0f}",
            f"{r['max_producer_lag_ms']:,.0f} ms",
            started,
            *(f"{lat[k]:.1f} ms" for k in ("p50", "p90", "p99", "p999", "max")),
            f"{r['from_call_p99_ms']:.1f} ms",
            "yes" if r["meets_target"] else "NO" if r["rate_reached"] else "NO (rate not reached)",
        )
    return t


def chart(plt: Any, args: argparse.Namespace, results: list[dict[str, Any]], machine: str) -> None:
    fig, (cdf, timeline) = plt.subplots(1, 2, figsize=(13, 5))
    for r in results:
        lat = r["cdf_ms"]
        label = f"{r['rate']:,.0f} jobs/s"
        (line,) = cdf.plot(lat, [(k + 1) / len(lat) for k in range(len(lat))], label=label)
        color = line.get_color()
        seconds = [x["second"] for x in r["timeline"]]
        timeline.plot(seconds, [x["p99_ms"] for x in r["timeline"]], color=color, label=f"{label} p99")
        timeline.plot(seconds, [x["p50_ms"] for x in r["timeline"]], ":", color=color, label=f"{label} p50")
    cdf.set_xscale("log")
    cdf.set_xlabel("enqueue -> start (ms, log scale)")
    cdf.set_ylabel("share of jobs")
    cdf.set_title("latency CDF")
    for ax in (cdf, timeline):
        ax.grid(alpha=0.3)
    cdf.axvline(args.target_ms, color="red", linestyle="--", linewidth=1)
    timeline.axhline(args.target_ms, color="red", linestyle="--", linewidth=1, label="target")
    timeline.set_xlabel("second of the run (by enqueue time)")
    timeline.set_ylabel("ms")
    timeline.set_title("latency per second of enqueueing")
    cdf.legend()
    timeline.legend(fontsize=8)
    fig.suptitle(f"duecast enqueue -> start, {args.workers} worker(s)\n{machine}", fontsize=10)
    harness.save_chart(plt, fig, args.chart)


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rate", type=float, default=1000.0, help="jobs/s (default 1000)")
    parser.add_argument("--rates", type=float, nargs="+", help="several rates, one after the other")
    parser.add_argument("--seconds", type=float, default=20.0, help="enqueueing time per rate")
    parser.add_argument("--workers", type=int, default=2, help="worker processes")
    parser.add_argument("--concurrency", type=int, default=1, help="handler threads per worker")
    parser.add_argument("--producers", type=int, default=1, help="enqueueing threads (own connections)")
    parser.add_argument(
        "--batch-ms",
        type=float,
        default=10.0,
        help="enqueue_many of the jobs due so far every N ms (default 10); 0: one enqueue per job",
    )
    parser.add_argument("--drain-timeout", type=float, default=30.0, help="wait this long for stragglers")
    parser.add_argument("--pause", type=float, default=2.0, help="idle seconds between rates")
    parser.add_argument("--target-ms", type=float, default=50.0, help="the p99 target")
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.add_argument("--chart", type=Path, help="also draw a PNG here (needs matplotlib)")
    args = parser.parse_args(argv)
    args.rates = args.rates or [args.rate]
    if min(args.rates) <= 0 or args.seconds <= 0 or args.workers < 1 or args.producers < 1:
        parser.error("rates and --seconds must be > 0, --workers and --producers >= 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    harness.use_bench_namespace()
    settings = load_settings().model_copy(update={"sources": []})
    harness.check_namespace(settings)
    if not settings.jobs.enabled:
        raise SystemExit("the jobs source is disabled (jobs.enabled = false); this benchmark needs it")
    plt = harness.chart_backend(args.chart)
    console = Console(stderr=True)
    with harness.exclusive(settings):
        prepare(settings)
        outcome = run_all(settings, args, console)
        prepare(settings)  # leave no jobs or entries behind
    out = harness.report_console()
    out.print(table(args, outcome["results"]))
    if outcome["duplicates"]:
        out.print(f"{outcome['duplicates']} job(s) ran more than once (at-least-once redeliveries)")
    machine = rescan.versions_line(settings)
    out.print(machine)
    if args.json:
        harness.write_json(args.json, {"args": vars(args), "machine": machine, **outcome})
    if plt is not None:
        chart(plt, args, outcome["results"], machine)
    return 0 if all(r["missing"] == 0 for r in outcome["results"]) else 1


if __name__ == "__main__":
    sys.exit(main())
