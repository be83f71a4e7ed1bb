"""Peer comparison for one-off jobs: duecast against Celery, RQ, Dramatiq, arq and the seeds' MySQL queues.

Each system enqueues --jobs jobs, then --workers worker processes drain them. Enqueue and drain
jobs/s are the median of --runs, all measured in this one invocation on the same servers. Two
workloads: `noop` (jobs that do nothing) and `io` (jobs that wait 20 ms on I/O, against the peers'
I/O setups: Celery and Dramatiq on gevent, arq). Peers run in .bench-venv and .bench-venv-arq
(bench/peers/setup_env.sh); duecast runs from the repo's .venv.
Usage: scripts/dev shell python bench/peers/run.py --jobs 100000 --runs 3 \\
         --chart docs/img/peers.png --json bench/results/peers.json
       scripts/dev shell python bench/peers/run.py --workload io --runs 3 --json bench/results/peers-io.json
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import report
import servers
from rich.console import Console

from duecast.shared.settings import load_settings

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
PYTHONS = {  # System.env -> its interpreter (duecast: this one, the repo's .venv)
    "peers": ROOT / ".bench-venv" / "bin" / "python",
    "arq": ROOT / ".bench-venv-arq" / "bin" / "python",
}
# Its own database, created and dropped by each run; DUECAST_BENCH_PEERS_DATABASE gives another name
# (duecast_bench_peers_*), so that two people on one server can run it at once.
DATABASE = os.environ.get("DUECAST_BENCH_PEERS_DATABASE", "duecast_bench_peers")
if not DATABASE.startswith("duecast_bench_peers"):
    raise SystemExit(f"DUECAST_BENCH_PEERS_DATABASE must start with duecast_bench_peers, not {DATABASE!r}")
KEY_PREFIX = "duecast-bench-peers"
ENQUEUE_ALLOWANCE_S = 900.0  # a driver is killed after --drain-timeout plus this (its enqueue has no cap)
DEFAULT_JOBS = {"noop": 100_000, "io": 20_000}
QUICK_JOBS = 2_000  # --quick: one run of this many jobs per system, to check that every driver works


@dataclass(frozen=True)
class System:
    name: str
    label: str
    env: str  # "duecast" (this interpreter), or a key of PYTHONS
    script: str
    configuration: str  # for the table; each driver's JSON carries its full settings
    workload: str = "noop"
    variant: str | None = None


SYSTEMS = (
    System(
        "duecast", "duecast", "duecast", "duecast_peer.py",
        "1 dispatcher + worker --processes W, defaults (batch 2,000)",
    ),
    System("celery", "Celery", "peers", "celery_peer.py", "W x worker --pool solo, prefetch 4, no results"),
    System("rq", "RQ", "peers", "rq_peer.py", "W x SimpleWorker, enqueue_many"),
    System("dramatiq", "Dramatiq", "peers", "dramatiq_peer.py", "--processes W --threads 8 (default)"),
    System(
        "mysql_owner_batch", "MySQL owner batch (seeds 000/001)", "peers", "seeds_peer.py",
        "W x UPDATE ... LIMIT 100, autocommit", variant="owner_batch",
    ),
    System(
        "mysql_last_insert_id", "MySQL LAST_INSERT_ID (seed 004)", "peers", "seeds_peer.py",
        "W x UPDATE ... LIMIT 1, autocommit", variant="last_insert_id",
    ),
    # The io workload: the first system is the baseline of its ratios.
    System(
        "duecast_async", "duecast, async def task", "duecast", "duecast_peer.py",
        "1 dispatcher + worker --processes W, defaults", "io", "plain",
    ),
    System(
        "duecast_threads", "duecast, plain task on 256 threads", "duecast", "duecast_peer.py",
        "1 dispatcher + worker --processes W, worker.concurrency 256", "io", "threads",
    ),
    System(
        "celery_gevent", "Celery (gevent)", "peers", "celery_peer.py",
        "W x worker -P gevent -c 1000, prefetch 4 x 1000, no results", "io", "gevent",
    ),
    System(
        "dramatiq_gevent", "Dramatiq (gevent)", "peers", "dramatiq_peer.py",
        "dramatiq-gevent --processes W --threads 250", "io", "gevent",
    ),
    System("arq", "arq (asyncio)", "arq", "arq_peer.py", "W x arq worker, max_jobs 1000, no results", "io"),
)  # fmt: skip


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument(
        "--workload", choices=("noop", "io"), default="noop", help="no-op jobs, or jobs that wait 20 ms"
    )
    p.add_argument("--jobs", type=int, help=f"jobs per system and run (default: {DEFAULT_JOBS})")
    p.add_argument("--workers", type=int, default=2, help="worker processes per system")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--systems", nargs="+", choices=[s.name for s in SYSTEMS], help="default: the workload's")
    p.add_argument(
        "--drain-timeout",
        type=float,
        default=20.0,
        help="seconds a drain may take; slower ones are cut short",
    )
    p.add_argument("--settle", type=float, default=2.0, help="pause between systems (MariaDB purge, flushes)")
    p.add_argument("--quick", action="store_true", help=f"1 run of {QUICK_JOBS:,} jobs: check that it works")
    p.add_argument("--json", type=Path, help="write the results here")
    p.add_argument("--chart", type=Path, help="write a PNG bar chart here (matplotlib, in .bench-venv)")
    p.add_argument("--log-dir", type=Path, help="process logs (default: a new temporary folder)")
    args = p.parse_args(argv)
    if args.quick:
        args.jobs, args.runs, args.settle = QUICK_JOBS, 1, 0.5
    args.jobs = args.jobs or DEFAULT_JOBS[args.workload]
    args.systems = args.systems or [s.name for s in SYSTEMS if s.workload == args.workload]
    others = [s.name for s in SYSTEMS if s.name in args.systems and s.workload != args.workload]
    if others:
        p.error(f"not systems of the {args.workload} workload: {', '.join(others)}")
    if args.jobs < 1 or args.workers < 1 or args.runs < 1:
        p.error("--jobs, --workers and --runs must be >= 1")
    for env in {s.env for s in SYSTEMS if s.name in args.systems} - {"duecast"}:
        if not PYTHONS[env].exists():
            p.error(f"{PYTHONS[env]} missing: run bench/peers/setup_env.sh first")
    return args


def run_driver(argv: list[str], env: dict[str, str], log: Path, timeout_s: float) -> dict[str, Any]:
    """Run one driver; its result is the JSON on its last stdout line."""
    with log.open("wb") as err:
        proc = subprocess.Popen(argv, cwd=HERE, env=env, stdout=subprocess.PIPE, stderr=err, text=True)
        try:
            out, _ = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGTERM)  # the driver stops its workers, then exits
            try:
                proc.communicate(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.communicate()
            return {"error": f"driver killed after {timeout_s:.0f} s (log: {log})"}
        except BaseException:
            proc.send_signal(signal.SIGTERM)
            proc.wait(30)
            raise
    lines = out.strip().splitlines()
    try:
        result: dict[str, Any] = json.loads(lines[-1])
    except (IndexError, json.JSONDecodeError):
        tail = " | ".join(log.read_text(errors="replace").strip().splitlines()[-3:])
        return {"error": f"driver exited {proc.returncode} without a result: {tail} (log: {log})"}
    return result


def children_env(redis_url: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "DUECAST_CONFIG"}
    return env | {
        "DUECAST_MYSQL__DATABASE": DATABASE,
        "DUECAST_REDIS__URL": redis_url,  # duecast uses the peers' private Redis too: same server for all
        "DUECAST_REDIS__KEY_PREFIX": KEY_PREFIX,
        "BENCH_REDIS_URL": redis_url,
    }


def driver_argv(system: System, args: argparse.Namespace, log_dir: Path) -> list[str]:
    python = sys.executable if system.env == "duecast" else str(PYTHONS[system.env])
    argv = [python, system.script, "--jobs", str(args.jobs), "--workers", str(args.workers),
            "--log-dir", str(log_dir), "--timeout", str(args.drain_timeout),
            "--workload", system.workload]  # fmt: skip
    return argv + (["--variant", system.variant] if system.variant else [])


def bench(args: argparse.Namespace, console: Console) -> dict[str, Any]:
    chosen = [s for s in SYSTEMS if s.name in args.systems]
    log_root = args.log_dir or Path(tempfile.mkdtemp(prefix="duecast-peers-"))
    os.environ["DUECAST_MYSQL__DATABASE"] = DATABASE  # before load_settings: never another database
    mysql = load_settings().mysql
    if mysql.database != DATABASE:  # drop_database below must only ever drop ours
        raise SystemExit(f"refusing to run against database {mysql.database!r}")
    loadavg = os.getloadavg()
    mariadb = servers.create_database(mysql)
    redis = servers.PrivateRedis(os.environ.get("DUECAST_REDIS_SERVER_BIN", "redis-server"))
    runs: list[dict[str, Any]] = []
    raws: list[dict[str, Any]] = []
    try:
        pythons = {PYTHONS[s.env] for s in chosen if s.env != "duecast"}
        facts = servers.machine_facts(pythons, mariadb, redis.version(), ROOT)
        facts["loadavg_at_start"] = loadavg
        for i in range(args.runs):
            order = chosen[i % len(chosen) :] + chosen[: i % len(chosen)]  # rotate: noise spreads evenly
            results: dict[str, Any] = {}
            raw_run: dict[str, Any] = {}
            for system in order:
                redis.flush()
                # Each system its own database number of the private server, so no two share a key.
                env = children_env(f"{redis.url.rsplit('/', 1)[0]}/{SYSTEMS.index(system)}")
                log_dir = log_root / f"run{i + 1}" / system.name
                log_dir.mkdir(parents=True, exist_ok=True)
                console.print(f"run {i + 1}/{args.runs}: {system.label} ...", end=" ")
                raw = run_driver(
                    driver_argv(system, args, log_dir),
                    env,
                    log_dir / "driver.log",
                    args.drain_timeout + ENQUEUE_ALLOWANCE_S,
                )
                raw_run[system.name] = raw
                results[system.name] = report.rates(raw, args.jobs)
                console.print(report.line(results[system.name]), highlight=False)
                time.sleep(args.settle)
            runs.append(results)
            raws.append(raw_run)
    finally:
        redis.stop()
        servers.drop_database(mysql)
    facts["loadavg_at_end"] = os.getloadavg()
    facts["logs"] = str(log_root)
    return {"facts": facts, "systems": chosen, "runs": runs, "raw": raws}


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def print_report(args: argparse.Namespace, done: dict[str, Any], summary: list[dict[str, Any]]) -> str:
    """The table, each system's setup, the machine, warnings and the duecast-vs-best-peer line; returns
    the table's title."""
    chosen: list[System] = done["systems"]
    labels = {s.name: s.label for s in chosen}
    what = "no-op jobs" if args.workload == "noop" else "jobs that each wait 20 ms"
    title = (
        f"{args.jobs:,} {what}, {args.workers} worker processes, median of {args.runs} "
        f"(drains cut at {args.drain_timeout:g} s)"
    )
    out = Console() if sys.stdout.isatty() else Console(width=160)
    out.print(report.table(summary, labels, title, args.jobs))
    for system in chosen:
        out.print(f"  {system.label}: {system.configuration}", highlight=False)
    facts = done["facts"]
    out.print(
        f"{facts['date']}; {facts['nproc']} CPUs ({facts['cpu']}); MariaDB {facts['mariadb']}, "
        f"Redis {facts['redis']}, Python {facts['python']}; duecast {facts['duecast_tree']}; "
        f"load average at start {facts['loadavg_at_start'][0]:.2f}, "
        f"at end {facts['loadavg_at_end'][0]:.2f}; logs {facts['logs']}",
        highlight=False,
    )
    peers = [s.name for s in chosen if s.env != "duecast"]
    if chosen[0].env == "duecast" and peers:
        ratio = report.vs_best_peer(done["runs"], chosen[0].name, peers)
        shown = "-" if ratio is None else f"{ratio:.2f}x"
        out.print(f"{chosen[0].label} vs the best peer of the same run (median of runs): {shown}")
    for warning in report.noise_warnings(facts, summary):
        out.print(f"[yellow]warning[/yellow]: {warning}")
    return title


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    # SIGTERM unwinds like Ctrl-C: the private Redis is stopped and our database dropped.
    signal.signal(signal.SIGTERM, _interrupt)
    console = Console(stderr=True)
    try:
        done = bench(args, console)
    except KeyboardInterrupt:
        console.print("interrupted; every process stopped, private Redis stopped, database dropped")
        return 130
    chosen: list[System] = done["systems"]
    summary = report.summarise([s.name for s in chosen], done["runs"], baseline=chosen[0].name)
    title = print_report(args, done, summary)
    labels = {s.name: s.label for s in chosen}
    out = {
        "title": title,
        "warnings": report.noise_warnings(done["facts"], summary),
        "command": " ".join(sys.argv),
        "args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        "machine": done["facts"],
        "systems": {
            s.name: {
                "label": s.label,
                "configuration": s.configuration,
                "settings": next(
                    (r[s.name].get("settings") for r in done["raw"] if "settings" in r[s.name]), None
                ),
            }
            for s in chosen
        },
        "summary": summary,
        "markdown": report.markdown(summary, labels, args.jobs),
    }
    json_path = args.json or Path(done["facts"]["logs"]) / "peers.json"
    json_path.parent.mkdir(parents=True, exist_ok=True)
    json_path.write_text(json.dumps(out, indent=2) + "\n")
    console.print(f"results: {json_path}")
    if args.chart:
        args.chart.parent.mkdir(parents=True, exist_ok=True)
        chart = [str(PYTHONS["peers"]), str(HERE / "chart.py"), str(json_path), str(args.chart)]
        subprocess.run(chart, check=True)
        console.print(f"chart: {args.chart}")
    return 1 if any(row["failed"] for row in summary) else 0


if __name__ == "__main__":
    sys.exit(main())
