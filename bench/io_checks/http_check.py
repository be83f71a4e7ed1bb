"""Benchmark: re-scan checks that make a real HTTP call, and what duecast adds to the client's own cost.

Starts a stub service (bench/io_checks/http_stub.py: 200 "ok" after 20 ms; --stub-procs processes
on one port), then per run:

1. duecast: range mode, --users users every --period s, one dispatcher and --workers workers whose
   `async def` row handler (http_app.py) GETs the stub with aiohttp, --concurrency checks in flight
   per worker (worker.max_in_flight, and the session's connection limit; 1,000 by default: a worker
   pops whole spans of 1,000 rows, and with fewer in flight it ran one span at a time, its CPU half
   idle). Measured after --warmup s: checks/s, and the workers' CPU seconds (/proc) per check.
2. bare: the same calls (http_bare.py, the same fetch code) with no duecast at all: --workers
   processes, --concurrency in flight each, as many calls as duecast made in its window, on the
   worker's own event loop (uvloop; --bare-loop asyncio for asyncio's, ~10% more CPU). CPU per call.

overhead = (worker CPU per check - bare CPU per call) / bare CPU per call; target <= 20%. The stub's
CPU is shown for both, to see that it is not what limits the rate. --compare measures the clients
(aiohttp, httpx) and the stubs (minimal asyncio, aiohttp's server) once, bare, side by side.

    scripts/dev shell python bench/io_checks/http_check.py --runs 3 --compare --json bench/results/http.json
    scripts/dev shell python bench/io_checks/http_check.py --quick --compare     # < 60 s: does it work?

Runs in database duecast_bench / key prefix duecast-bench (see bench/harness.py).
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(1, str(Path(__file__).resolve().parent.parent))  # bench/: harness.py, rescan.py

import fleet
import harness
import rescan
from http_app import LIMIT_ENV, URL_ENV
from rich.console import Console
from rich.table import Table

from duecast.cli.demo import run as demo
from duecast.cli.demo.fleet import cpu_seconds
from duecast.shared.settings import Settings, load_settings

HERE = Path(__file__).resolve().parent
QUICK = {"users": 20_000, "period": 2.0, "seconds": 10.0, "warmup": 4.0, "runs": 1, "compare_calls": 1000}
STUB_BUSY = 0.8  # stub cores per stub process above this: the stub may be what limits the rate


@contextmanager
def stub(kind: str, procs: int) -> Iterator[tuple[str, list[int]]]:
    """`procs` stub processes sharing a free port; yields its base URL and their pids."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    argv = [sys.executable, str(HERE / "http_stub.py"), "--kind", kind, "--port", str(port)]
    started = [subprocess.Popen(argv, stdout=subprocess.PIPE, text=True) for _ in range(procs)]
    try:
        for proc in started:
            if proc.stdout is None or proc.stdout.readline().strip() != "ready":
                raise SystemExit(f"the {kind} stub did not start (exit code {proc.poll()})")
        yield f"http://127.0.0.1:{port}", [p.pid for p in started]
    finally:
        for proc in started:
            proc.terminate()
        for proc in started:
            proc.wait(10)


def bare(
    url: str, calls: int, concurrency: int, procs: int, *, client: str = "aiohttp", loop: str = "duecast"
) -> dict[str, float]:
    """`calls` calls split over `procs` bare loop processes at once; their summed calls and CPU."""
    argv = [sys.executable, str(HERE / "http_bare.py"), "--client", client, "--url", url, "--loop", loop,
            "--concurrency", str(concurrency), "--calls"]  # fmt: skip
    shares = [calls // procs + (i < calls % procs) for i in range(procs)]
    running = [subprocess.Popen([*argv, str(n)], stdout=subprocess.PIPE, text=True) for n in shares]
    lines = [json.loads(p.communicate()[0].strip().splitlines()[-1]) for p in running]
    return {
        "calls": sum(x["calls"] for x in lines),
        "errors": sum(x["errors"] for x in lines),
        "wall_s": max(x["wall_s"] for x in lines),
        "cpu_s": sum(x["cpu_s"] for x in lines),
    }


def stub_cpu(pids: list[int]) -> float:
    return sum(cpu_seconds(pid) for pid in pids)


def one_run(
    settings: Settings, args: argparse.Namespace, url: str, pids: list[int], console: Console
) -> dict[str, Any]:
    setup = fleet.Setup(
        users=args.users,
        period_s=args.period,
        workers=args.workers,
        seconds=args.seconds,
        app="http_app",
        worker_toml={"max_in_flight": args.concurrency},
        env={URL_ENV: url, LIMIT_ENV: str(args.concurrency)},
    )
    db_pid = rescan.mariadb_pid()
    watch = {f"stub-{i}": pid for i, pid in enumerate(pids)} | ({"mariadb": db_pid} if db_pid else {})
    out = fleet.run(settings, setup, console, watch)
    if failure := out.failure():
        raise SystemExit(f"run failed: {failure}")
    if note := out.shutdown_note():
        console.print(f"[yellow]warning[/yellow]: {note}")
    first, last = out.window(args.warmup)
    checks = last.acked - first.acked
    if checks <= 0:
        raise SystemExit(f"no check was acked after the warm-up (logs: {out.log_dir})")
    stub_before = stub_cpu(pids)
    plain = bare(url, checks, args.concurrency, args.workers, loop=args.bare_loop)
    stub_bare = stub_cpu(pids) - stub_before
    worker_cpu = out.cpu(args.warmup, "worker") / checks
    bare_cpu = plain["cpu_s"] / plain["calls"]
    return {
        "checks_per_s": out.rate(args.warmup),
        "failed_per_s": out.rate(args.warmup, "failed"),
        "worker_cores": out.cores(args.warmup, "worker"),
        "worker_cpu_us": worker_cpu * 1e6,
        "bare_calls_per_s": plain["calls"] / plain["wall_s"],
        "bare_cpu_us": bare_cpu * 1e6,
        "bare_errors": plain["errors"],
        "overhead": (worker_cpu - bare_cpu) / bare_cpu,
        "stub_cores": out.cores(args.warmup, "stub"),
        "stub_cores_bare": stub_bare / plain["wall_s"],
        "cores": {k: out.cores(args.warmup, k) for k in ("mariadb", "dispatcher")},
        "logs": str(out.log_dir),
    }


def compare(args: argparse.Namespace, console: Console) -> list[dict[str, Any]]:
    """Each client against each stub kind, bare, one process: CPU per call of client and stub."""
    rows = []
    for client, kind in (("aiohttp", "asyncio"), ("aiohttp", "aiohttp"), ("httpx", "asyncio")):
        console.print(f"compare: {client} client, {kind} stub, {args.compare_calls:,} calls")
        with stub(kind, 1) as (url, pids):
            before = stub_cpu(pids)
            r = bare(url, args.compare_calls, args.compare_concurrency, 1, client=client)
            stub_s = stub_cpu(pids) - before
        rows.append(
            {"client": client, "stub": kind, "calls_per_s": r["calls"] / r["wall_s"],
             "client_cpu_us": r["cpu_s"] / r["calls"] * 1e6, "stub_cpu_us": stub_s / r["calls"] * 1e6}
        )  # fmt: skip
    return rows


def med(runs: list[dict[str, Any]], key: str, sub: str | None = None) -> float:
    return float(statistics.median(float(r[key][sub] if sub else r[key]) for r in runs))


def table(args: argparse.Namespace, runs: list[dict[str, Any]]) -> Table:
    t = Table(
        title=f"re-scan with an HTTP call per check: {args.users:,} users every {args.period:g} s, "
        f"{args.workers} workers x {args.concurrency} in flight, {args.stub} stub x {args.stub_procs}, "
        f"bare on the {args.bare_loop} loop "
        f"(median of {args.runs}, {args.seconds:g} s runs)"
    )
    cols = ("", "checks/s", "checks/s per worker core", "worker CPU per check", "bare CPU per call",
            "duecast overhead", "bare calls/s", "stub cores: duecast / bare",
            "cores: MariaDB / dispatcher")  # fmt: skip
    for col in cols:
        t.add_column(col, justify="right")
    rows = [(f"run {i + 1}", [r]) for i, r in enumerate(runs)] + [("median", runs)]
    for label, rs in rows:
        t.add_row(
            label,
            f"{med(rs, 'checks_per_s'):,.0f}",
            f"{med(rs, 'checks_per_s') / max(med(rs, 'worker_cores'), 1e-9):,.0f}",
            f"{med(rs, 'worker_cpu_us'):.1f} µs",
            f"{med(rs, 'bare_cpu_us'):.1f} µs",
            f"{med(rs, 'overhead'):+.1%}",
            f"{med(rs, 'bare_calls_per_s'):,.0f}",
            f"{med(rs, 'stub_cores'):.2f} / {med(rs, 'stub_cores_bare'):.2f}",
            f"{med(rs, 'cores', 'mariadb'):.2f} / {med(rs, 'cores', 'dispatcher'):.2f}",
        )
    return t


def compare_table(rows: list[dict[str, Any]], args: argparse.Namespace) -> Table:
    t = Table(
        title=f"clients and stubs, bare: {args.compare_calls:,} calls, {args.compare_concurrency} in flight"
    )
    for col in ("client", "stub", "calls/s", "client CPU per call", "stub CPU per request"):
        t.add_column(col, justify="right")
    for r in rows:
        t.add_row(r["client"], r["stub"], f"{r['calls_per_s']:,.0f}", f"{r['client_cpu_us']:.0f} µs",
                  f"{r['stub_cpu_us']:.0f} µs")  # fmt: skip
    return t


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--users", type=int, default=1_000_000)
    p.add_argument("--period", type=float, default=10.0)
    p.add_argument("--seconds", type=float, default=40.0)
    p.add_argument("--warmup", type=float, default=12.0, help="seconds left out of the figures")
    p.add_argument("--workers", type=int, default=3)
    p.add_argument("--concurrency", type=int, default=1000, help="checks (calls) in flight per process")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--stub", choices=("asyncio", "aiohttp"), default="asyncio")
    p.add_argument("--stub-procs", type=int, default=1)
    p.add_argument("--bare-loop", choices=("duecast", "asyncio"), default="duecast",
                   help="the bare loop's event loop: the worker's (uvloop) or asyncio's")  # fmt: skip
    p.add_argument("--compare", action="store_true", help="also compare clients and stubs, bare, once")
    p.add_argument("--compare-calls", type=int, default=5000)
    # httpx's pool costs more per call the more connections it has: ~3 ms at 64, ~4-8 ms at 256.
    p.add_argument("--compare-concurrency", type=int, default=64)
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
    runs: list[dict[str, Any]] = []
    with harness.exclusive(settings), stub(args.stub, args.stub_procs) as (url, pids):
        for i in range(args.runs):
            console.rule(f"run {i + 1}/{args.runs}")
            runs.append(one_run(settings, args, url, pids, console))
            console.print(f"{runs[-1]['checks_per_s']:,.0f} checks/s, overhead {runs[-1]['overhead']:+.1%}")
    compared = compare(args, console) if args.compare else []
    out = harness.report_console()
    out.print(table(args, runs))
    if compared:
        out.print(compare_table(compared, args))
    out.print(
        "target: duecast's overhead <= 20% of the bare client's CPU per call; "
        + rescan.versions_line(settings)
    )
    if med(runs, "stub_cores") > STUB_BUSY * args.stub_procs:
        out.print(
            f"[yellow]warning[/yellow]: the stub used {med(runs, 'stub_cores'):.2f} cores: try --stub-procs"
        )
    if args.json:
        harness.write_json(args.json, {"args": vars(args), "runs": runs, "compare": compared})
    return 0


if __name__ == "__main__":
    sys.exit(main())
