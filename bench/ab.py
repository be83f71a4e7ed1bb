"""Same-run A/B of two checkouts: bench/jobs.py (the jobs drain) and bench/rescan.py (the range
re-scan) run in turn in each checkout, round after round, so both see the same machine; prints the
median of each and the ratio. For a change that must not slow duecast down (a restructuring).

    git worktree add ../duecast-before <commit>
    python bench/ab.py --before ../duecast-before                  # 3 rounds, 100,000 jobs, 1M users
    python bench/ab.py --before ../duecast-before --rounds 5 --users 200000 --seconds 30
    python bench/ab.py --before ../duecast-before --benches jobs --rounds 7 --jobs 300000
    python bench/ab.py --before ../duecast-before --benches path --rounds 9   # bench/job_path.py

Each checkout runs its own code with its own .venv (`scripts/dev shell`, built on first use), in a
namespace of its own: <database>_before / _after and <prefix>-before / -after, where database and
prefix are DUECAST_MYSQL__DATABASE and DUECAST_REDIS__KEY_PREFIX if they name a benchmark namespace
(duecast_bench* / duecast-bench*), else duecast_bench / duecast-bench. Runs never overlap. The jobs
drain also reports the workers' CPU per job (less sensitive than the wall clock to what else runs
on the machine), and each round the load average it started at.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parents[1]


def namespace(side: str) -> dict[str, str]:
    """This side's database and key prefix, inside the benchmark namespace bench/harness.py allows."""
    db = os.environ.get("DUECAST_MYSQL__DATABASE", "")
    prefix = os.environ.get("DUECAST_REDIS__KEY_PREFIX", "")
    db = db if db.startswith("duecast_bench") else "duecast_bench"
    prefix = prefix if prefix.startswith("duecast-bench") else "duecast-bench"
    return {"DUECAST_MYSQL__DATABASE": f"{db}_{side}", "DUECAST_REDIS__KEY_PREFIX": f"{prefix}-{side}"}


def one(checkout: Path, side: str, bench: str, args: list[str]) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "result.json"
        script = bench if Path(bench).is_absolute() else f"bench/{bench}"  # absolute: this checkout's
        cmd = ["bash", "scripts/dev", "shell", "python", script, *args, "--runs", "1"]
        subprocess.run(
            [*cmd, "--json", str(out)],
            cwd=checkout,
            check=True,
            stdout=subprocess.DEVNULL,
            env={**os.environ, **namespace(side)},
        )
        return dict(json.loads(out.read_text()))


def jobs_rate(result: dict[str, Any]) -> float:
    return float(result["results"][0]["drain_jobs_per_s"])


def jobs_worker_cpu_us(result: dict[str, Any]) -> float:
    """The workers' CPU per drained job, µs (their start-up included, as in bench/jobs.py's table)."""
    run = result["results"][0]
    workers = sum(v for k, v in run["cpu_s"].items() if k.startswith("worker"))
    return float(workers / result["args"]["jobs"] * 1e6)


def path_cpu_us(result: dict[str, Any]) -> float:
    return float(result["results"][0]["cpu_us_per_job"])


def rescan_rate(result: dict[str, Any]) -> float:
    return float(result["results"][0]["runs"][0]["checks_per_s"])


Measure = tuple[str, Callable[[dict[str, Any]], float]]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--before", type=Path, required=True, help="the other checkout (the baseline)")
    p.add_argument("--after", type=Path, default=HERE, help="this checkout unless given")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--jobs", type=int, default=100_000)
    p.add_argument("--users", type=int, default=1_000_000)
    p.add_argument("--seconds", type=float, default=40.0)
    p.add_argument("--benches", nargs="+", choices=("jobs", "rescan", "path"), default=["jobs", "rescan"])
    args = p.parse_args(argv)
    benches: dict[str, tuple[str, list[str], list[Measure]]] = {
        "jobs": (
            "jobs.py",
            ["--jobs", str(args.jobs)],
            [("jobs drain, jobs/s", jobs_rate), ("jobs drain, worker CPU µs/job", jobs_worker_cpu_us)],
        ),
        "rescan": (
            "rescan.py",
            ["--users", str(args.users), "--seconds", str(args.seconds), "--modes", "ranges"],
            [("range re-scan, checks/s", rescan_rate)],
        ),
        # This checkout's script in both: it imports only what older checkouts have too.
        "path": (
            str(HERE / "bench" / "job_path.py"),
            [],
            [("a job's path in a worker, CPU µs/job", path_cpu_us)],
        ),
    }
    seen: dict[tuple[str, str], list[float]] = {}
    loads: list[float] = []
    for n in range(args.rounds):
        loads.append(os.getloadavg()[0])
        for key in args.benches:
            bench, bench_args, measures = benches[key]
            # Alternate which side goes first, so a slow spell of the machine does not favour one.
            sides = [("before", args.before), ("after", args.after)]
            for side, checkout in sides if n % 2 == 0 else sides[::-1]:
                result = one(checkout.resolve(), side, bench, bench_args)
                for name, measure in measures:
                    value = measure(result)
                    seen.setdefault((name, side), []).append(value)
                    print(f"round {n + 1}: {name} {side}: {value:,.1f}", file=sys.stderr, flush=True)
    print(f"load average (1 min) at each round's start: {', '.join(f'{x:.1f}' for x in loads)}")
    print(
        f"| benchmark (median of {args.rounds}, same run) | before | after | after / before "
        "| runs before | runs after |"
    )
    print("|---|--:|--:|--:|---|---|")
    for key in args.benches:
        for name, _ in benches[key][2]:
            before, after = seen[(name, "before")], seen[(name, "after")]
            mb, ma = statistics.median(before), statistics.median(after)
            digits = 1 if mb < 100 else 0
            runs = [", ".join(f"{v:,.{digits}f}" for v in xs) for xs in (before, after)]
            ratio = f"{ma / mb:.3f}" if mb else "-"  # a run that measured nothing (its window saw no checks)
            print(f"| {name} | {mb:,.{digits}f} | {ma:,.{digits}f} | {ratio} | {runs[0]} | {runs[1]} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
