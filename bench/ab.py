"""Same-run A/B of two checkouts: bench/jobs.py (the jobs drain) and bench/rescan.py (the range
re-scan) run in turn in each checkout, round after round, so both see the same machine; prints the
median of each and the ratio. For a change that must not slow duecast down (a restructuring).

    git worktree add ../duecast-before <commit>
    python bench/ab.py --before ../duecast-before                  # 3 rounds, 100,000 jobs, 1M users
    python bench/ab.py --before ../duecast-before --rounds 5 --users 200000 --seconds 30

Each checkout runs its own code with its own .venv (`scripts/dev shell`, built on first use), in the
benchmark namespace (duecast_bench / duecast-bench): runs never overlap.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parents[1]


def one(checkout: Path, bench: str, args: list[str]) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "result.json"
        cmd = ["bash", "scripts/dev", "shell", "python", f"bench/{bench}", *args, "--runs", "1"]
        subprocess.run([*cmd, "--json", str(out)], cwd=checkout, check=True, stdout=subprocess.DEVNULL)
        return dict(json.loads(out.read_text()))


def jobs_rate(result: dict[str, Any]) -> float:
    return float(result["results"][0]["drain_jobs_per_s"])


def rescan_rate(result: dict[str, Any]) -> float:
    return float(result["results"][0]["runs"][0]["checks_per_s"])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--before", type=Path, required=True, help="the other checkout (the baseline)")
    p.add_argument("--after", type=Path, default=HERE, help="this checkout unless given")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--jobs", type=int, default=100_000)
    p.add_argument("--users", type=int, default=1_000_000)
    p.add_argument("--seconds", type=float, default=40.0)
    args = p.parse_args(argv)
    benches = {
        "jobs drain, jobs/s": ("jobs.py", ["--jobs", str(args.jobs)], jobs_rate),
        "range re-scan, checks/s": (
            "rescan.py", ["--users", str(args.users), "--seconds", str(args.seconds), "--modes", "ranges"],
            rescan_rate,
        ),
    }
    seen: dict[tuple[str, str], list[float]] = {}
    for n in range(args.rounds):
        for name, (bench, bench_args, rate) in benches.items():
            # Alternate which side goes first, so a slow spell of the machine does not favour one.
            sides = [("before", args.before), ("after", args.after)]
            for side, checkout in sides if n % 2 == 0 else sides[::-1]:
                value = rate(one(checkout.resolve(), bench, bench_args))
                seen.setdefault((name, side), []).append(value)
                print(f"round {n + 1}: {name} {side}: {value:,.0f}", file=sys.stderr, flush=True)
    print(f"| benchmark (median of {args.rounds}, same run) | before | after | after / before "
          "| runs before | runs after |")
    print("|---|--:|--:|--:|---|---|")
    for name in benches:
        before, after = seen[(name, "before")], seen[(name, "after")]
        mb, ma = statistics.median(before), statistics.median(after)
        runs = [", ".join(f"{v:,.0f}" for v in xs) for xs in (before, after)]
        ratio = f"{ma / mb:.3f}" if mb else "-"  # a run that measured nothing (its window saw no checks)
        print(f"| {name} | {mb:,.0f} | {ma:,.0f} | {ratio} | {runs[0]} | {runs[1]} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
