"""Benchmark: README's HTTP check against a service of limited capacity, every setting at its default.

Starts a stub service that answers at most --rate calls a second and never answers a call past that
(http_stub.py --rate: a token bucket; a call that would wait more than --max-wait s for its slot
times out at the client), then one run: row mode, --users users every --period s (more checks a
second than the stub takes), one dispatcher and --workers workers running README's
`# myapp/handlers.py` block as printed (readme_app.py: aiohttp's 100 connections, a 5 s timeout).
No worker setting is given: `worker.max_in_flight` is unset, so each source's in-flight window
adapts (docs/architecture.md, "In flight that fits the service called").

Reported after --warmup s: the share of checks that succeeded, checks/s, and the per-second
checks (p10 / median / p90 of the 1-s windows). Targets: >= 95% succeed, the rate near --rate.

    scripts/dev shell python bench/io_checks/capacity.py                 # 50,000 users, 60 s
    scripts/dev shell python bench/io_checks/capacity.py --quick         # < 60 s: does it work?
    scripts/dev shell python bench/io_checks/capacity.py --timeout-s 5   # timeout_s = the client's

Runs in database duecast_bench / key prefix duecast-bench (see bench/harness.py).
"""

from __future__ import annotations

import argparse
import itertools
import socket
import statistics
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(1, str(Path(__file__).resolve().parent.parent))  # bench/: harness.py

import fleet
import harness
from http_app import URL_ENV
from rich.console import Console

from duecast.cli.demo import run as demo
from duecast.shared.settings import load_settings

HERE = Path(__file__).resolve().parent
QUICK = {"users": 30_000, "seconds": 40.0, "warmup": 20.0}


@contextmanager
def limited_stub(rate: float, max_wait_s: float) -> Iterator[str]:
    """One asyncio stub process taking at most `rate` calls a second; yields its base URL."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    argv = [sys.executable, str(HERE / "http_stub.py"), "--port", str(port), "--delay", "0",
            "--rate", str(rate), "--max-wait", str(max_wait_s)]  # fmt: skip
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    try:
        if proc.stdout is None or proc.stdout.readline().strip() != "ready":
            raise SystemExit(f"the stub did not start (exit code {proc.poll()})")
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(10)


def per_second(out: fleet.Outcome, skip_s: float, counter: str) -> list[float]:
    """The counter's 1-s windows after `skip_s` (the samples are a second apart)."""
    start = out.ticks[0].t + skip_s
    ticks = [t for t in out.ticks if t.t >= start]
    return [
        (b.counters.get(counter, 0) - a.counters.get(counter, 0)) / (b.t - a.t)
        for a, b in itertools.pairwise(ticks)
        if b.t > a.t
    ]


def summary(out: fleet.Outcome, warmup_s: float) -> dict[str, Any]:
    first, last = out.window(warmup_s)
    acked = last.acked - first.acked
    failed = last.counters.get("failed", 0) - first.counters.get("failed", 0)
    series = per_second(out, warmup_s, "acked")
    q = statistics.quantiles(series, n=10) if len(series) >= 2 else [0.0] * 9
    return {
        "succeeded": acked / (acked + failed) if acked + failed else 0.0,
        "checks_per_s": out.rate(warmup_s),
        "worker_cores": out.cores(warmup_s, "worker"),
        "failed_per_s": out.rate(warmup_s, "failed"),
        "p10": q[0],
        "median": statistics.median(series) if series else 0.0,
        "p90": q[-1],
        "failed_whole_run": last.counters.get("failed", 0),
        "acked_whole_run": last.acked,
        "series": [round(x) for x in per_second(out, 0.0, "acked")],
        "failed_series": [round(x) for x in per_second(out, 0.0, "failed")],
        "logs": str(out.log_dir),
    }


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--users", type=int, default=50_000)
    p.add_argument("--period", type=float, default=10.0)
    p.add_argument("--seconds", type=float, default=60.0)
    p.add_argument("--warmup", type=float, default=20.0, help="seconds left out of the figures")
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--rate", type=float, default=2000.0, help="the stub's capacity, calls/s")
    p.add_argument("--max-wait", type=float, default=1.0, help="the stub's queue, in seconds of its rate")
    p.add_argument(
        "--timeout-s",
        type=float,
        help="the source's timeout_s (unset: its default, 30 s; README's client: 5 s)",
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
    settings = demo.demo_settings(load_settings(), args.period, 2000, "rows")
    harness.check_namespace(settings)
    console = Console(stderr=True)
    with harness.exclusive(settings), limited_stub(args.rate, args.max_wait) as url:
        setup = fleet.Setup(
            users=args.users,
            period_s=args.period,
            workers=args.workers,
            seconds=args.seconds,
            app="readme_app:handlers",
            env={URL_ENV: url},
            source_toml={} if args.timeout_s is None else {"timeout_s": args.timeout_s},
        )
        out = fleet.run(settings, setup, console)
    if failure := out.failure(errors_expected=True):  # failed checks log their tracebacks
        raise SystemExit(f"run failed: {failure}")
    result = summary(out, args.warmup)
    report = harness.report_console()
    report.print(
        f"README's HTTP check, {args.users:,} users every {args.period:g} s "
        f"({args.users / args.period:,.0f} checks/s asked), {args.workers} worker(s), every setting at "
        f"its default, against a stub of {args.rate:,.0f} calls/s; "
        f"after {args.warmup:g} s of {args.seconds:g}:"
    )
    report.print(
        f"  succeeded {result['succeeded']:.1%}, {result['checks_per_s']:,.0f} checks/s "
        f"({result['failed_per_s']:,.0f} failed/s, {result['worker_cores']:.2f} worker cores); "
        f"1-s windows p10 {result['p10']:,.0f} / median "
        f"{result['median']:,.0f} / p90 {result['p90']:,.0f}"
    )
    report.print(f"  checks per second, whole run: {result['series']}")
    report.print(f"  failed per second, whole run: {result['failed_series']}")
    report.print("targets: >= 95% succeed after the warm-up, the rate near the stub's")
    if args.json:
        harness.write_json(args.json, {"args": vars(args), "result": result})
    return 0


if __name__ == "__main__":
    sys.exit(main())
