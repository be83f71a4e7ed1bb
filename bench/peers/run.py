"""Peer comparison for one-off jobs: duecast against Celery, RQ, Dramatiq and the seeds' pure-MySQL queues.

Each system enqueues --jobs no-op jobs, then --workers worker processes drain them. Enqueue and drain
jobs/s are the median of --runs, all measured in this one invocation on the same servers. Peers run
in .bench-venv (bench/peers/setup_env.sh); duecast runs from the repo's .venv.
Usage: scripts/dev shell python bench/peers/run.py --jobs 100000 --runs 3 \\
         --chart docs/img/peers.png --json bench/results/peers.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import report
import servers
from rich.console import Console

from duecast.shared.settings import load_settings

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
BENCH_PYTHON = ROOT / ".bench-venv" / "bin" / "python"
DATABASE = "duecast_bench_peers"
KEY_PREFIX = "duecast-bench-peers"
PEER_PACKAGES = ("celery", "kombu", "rq", "dramatiq", "redis", "hiredis", "PyMySQL", "matplotlib")
PRODUCT_DIRS = ("shared", "dispatcher", "worker", "duecast")
BUSY_LOAD = 1.0  # 1-minute load average before we start anything: above it, others were running
ENQUEUE_ALLOWANCE_S = 900.0  # a driver is killed after --drain-timeout plus this (its enqueue has no cap)


@dataclass(frozen=True)
class System:
    name: str
    label: str
    bench_env: bool  # True: runs in .bench-venv; False: in duecast's .venv (this interpreter)
    script: str
    configuration: str  # for the table; each driver's JSON carries its full settings
    variant: str | None = None


SYSTEMS = (
    System(
        "duecast", "duecast", False, "duecast_peer.py", "1 dispatcher + W workers, defaults (batch 2,000)"
    ),
    System("celery", "Celery", True, "celery_peer.py", "W x worker --pool solo, prefetch 4, no results"),
    System("rq", "RQ", True, "rq_peer.py", "W x SimpleWorker, enqueue_many"),
    System("dramatiq", "Dramatiq", True, "dramatiq_peer.py", "--processes W --threads 8 (default)"),
    System(
        "mysql_owner_batch",
        "MySQL owner batch (seeds 000/001)",
        True,
        "seeds_peer.py",
        "W x UPDATE ... LIMIT 100, autocommit",
        "owner_batch",
    ),
    System(
        "mysql_last_insert_id",
        "MySQL LAST_INSERT_ID (seed 004)",
        True,
        "seeds_peer.py",
        "W x UPDATE ... LIMIT 1, autocommit",
        "last_insert_id",
    ),
)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--jobs", type=int, default=100_000)
    p.add_argument("--workers", type=int, default=2, help="worker processes per system")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument(
        "--systems", nargs="+", choices=[s.name for s in SYSTEMS], default=[s.name for s in SYSTEMS]
    )
    p.add_argument(
        "--drain-timeout",
        type=float,
        default=20.0,
        help="seconds a drain may take; slower ones are cut short",
    )
    p.add_argument("--settle", type=float, default=2.0, help="pause between systems (MariaDB purge, flushes)")
    p.add_argument("--json", type=Path, help="write the results here")
    p.add_argument("--chart", type=Path, help="write a PNG bar chart here (matplotlib, in .bench-venv)")
    p.add_argument("--log-dir", type=Path, help="process logs (default: a new temporary folder)")
    p.add_argument("--bench-python", type=Path, default=BENCH_PYTHON)
    args = p.parse_args(argv)
    if args.jobs < 1 or args.workers < 1 or args.runs < 1:
        p.error("--jobs, --workers and --runs must be >= 1")
    if not args.bench_python.exists():
        p.error(f"{args.bench_python} missing: run bench/peers/setup_env.sh first")
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


def machine_facts(bench_python: Path, mariadb: str, redis_v: str) -> dict[str, Any]:
    script = (
        "import json; from importlib.metadata import version as v; "
        f"print(json.dumps({{p: v(p) for p in {PEER_PACKAGES!r}}}))"
    )
    versions = subprocess.run(
        [str(bench_python), "-c", script], capture_output=True, text=True, check=True
    ).stdout
    cpu = next(
        (line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
         if line.startswith("model name")),
        platform.processor(),
    )  # fmt: skip
    commit = _git("rev-parse", "--short", "HEAD").strip() or "?"
    # Others edit the product while this runs: say whether the measured code was the commit's.
    changed = _git("status", "--porcelain", "--", *PRODUCT_DIRS).splitlines()
    return {
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "nproc": os.cpu_count(),
        "cpu": cpu,
        "mariadb": mariadb,
        "redis": redis_v,
        "python": platform.python_version(),
        "duecast_tree": f"{commit}" + (f" + uncommitted changes in {len(changed)} files" if changed else ""),
        "peers": json.loads(versions),
        "loadavg_at_start": os.getloadavg(),
    }


def _git(*args: str) -> str:
    """Read-only git queries (never anything that changes the index or the working tree)."""
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=False).stdout


def children_env(redis_url: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "DUECAST_CONFIG"}
    return env | {
        "DUECAST_MYSQL__DATABASE": DATABASE,
        "DUECAST_REDIS__URL": redis_url,  # duecast uses the peers' private Redis too: same server for all
        "DUECAST_REDIS__KEY_PREFIX": KEY_PREFIX,
        "BENCH_REDIS_URL": redis_url,
    }


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
        facts = machine_facts(args.bench_python, mariadb, redis.version())
        facts["loadavg_at_start"] = loadavg
        env = children_env(redis.url)
        for i in range(args.runs):
            order = chosen[i % len(chosen) :] + chosen[: i % len(chosen)]  # rotate: noise spreads evenly
            results: dict[str, Any] = {}
            raw_run: dict[str, Any] = {}
            for system in order:
                redis.flush()
                log_dir = log_root / f"run{i + 1}" / system.name
                log_dir.mkdir(parents=True, exist_ok=True)
                python = str(args.bench_python) if system.bench_env else sys.executable
                argv = [python, system.script, "--jobs", str(args.jobs), "--workers", str(args.workers),
                        "--log-dir", str(log_dir), "--timeout", str(args.drain_timeout)]  # fmt: skip
                if system.variant:
                    argv += ["--variant", system.variant]
                console.print(f"run {i + 1}/{args.runs}: {system.label} ...", end=" ")
                raw = run_driver(argv, env, log_dir / "driver.log", args.drain_timeout + ENQUEUE_ALLOWANCE_S)
                raw_run[system.name] = raw
                results[system.name] = report.rates(raw, args.jobs)
                console.print(_line(results[system.name]), highlight=False)
                time.sleep(args.settle)
            runs.append(results)
            raws.append(raw_run)
    finally:
        redis.stop()
        servers.drop_database(mysql)
    facts["loadavg_at_end"] = os.getloadavg()
    facts["logs"] = str(log_root)
    return {"facts": facts, "systems": chosen, "runs": runs, "raw": raws}


def _line(r: dict[str, Any]) -> str:
    if "error" in r:
        return f"[red]failed[/red]: {r['error']}"
    cut = " (cut short)" if r["cut_short"] else ""
    errs = f" [red]errors[/red]: {r['errors'][:2]}" if r["errors"] else ""
    return (
        f"enqueue {report.num(r['enqueue_per_s'])}/s, drain {report.num(r['drain_per_s'])}/s{cut}, "
        f"first job done at {r['first_progress_s'] or 0:.1f} s{errs}"
    )


def noise_warnings(facts: dict[str, Any], summary: list[dict[str, Any]]) -> list[str]:
    """Signs that other work on the machine disturbed the numbers."""
    out = []
    load = facts["loadavg_at_start"][0]
    if load > BUSY_LOAD:
        out.append(f"the machine was busy before the benchmark started (load average {load:.2f})")
    noisy = [row["system"] for row in summary if row["drain_spread"] > report.NOISY_SPREAD]
    if noisy:
        out.append(f"drain runs spread more than {report.NOISY_SPREAD:.0%} for: {', '.join(noisy)}")
    return out


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


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
    names = [s.name for s in chosen]
    summary = report.summarise(names, done["runs"])
    labels = {s.name: s.label for s in chosen}
    title = (
        f"{args.jobs:,} no-op jobs, {args.workers} worker processes, median of {args.runs} "
        f"(drains cut at {args.drain_timeout:g} s)"
    )
    out_console = Console()
    out_console.print(report.table(summary, labels, title, args.jobs))
    for system in chosen:
        out_console.print(f"  {system.label}: {system.configuration}", highlight=False)
    facts = done["facts"]
    warnings = noise_warnings(facts, summary)
    out_console.print(
        f"{facts['date']}; {facts['nproc']} CPUs ({facts['cpu']}); MariaDB {facts['mariadb']}, "
        f"Redis {facts['redis']}, Python {facts['python']}; duecast {facts['duecast_tree']}; "
        f"load average at start {facts['loadavg_at_start'][0]:.2f}, "
        f"at end {facts['loadavg_at_end'][0]:.2f}; logs {facts['logs']}",
        highlight=False,
    )
    for warning in warnings:
        out_console.print(f"[yellow]warning[/yellow]: {warning}")
    out = {
        "title": title,
        "warnings": warnings,
        "command": " ".join(sys.argv),
        "args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        "machine": facts,
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
    json_path = args.json or Path(facts["logs"]) / "peers.json"
    json_path.parent.mkdir(parents=True, exist_ok=True)
    json_path.write_text(json.dumps(out, indent=2) + "\n")
    console.print(f"results: {json_path}")
    if args.chart:
        args.chart.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            [str(args.bench_python), str(HERE / "chart.py"), str(json_path), str(args.chart)], check=True
        )
        console.print(f"chart: {args.chart}")
    return 1 if any(row["failed"] for row in summary) else 0


if __name__ == "__main__":
    sys.exit(main())
