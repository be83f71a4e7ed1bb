"""The chaos suite's long version: the soak scenario at full size, from the command line.

    scripts/dev shell python -m tests.chaos.run --jobs 1000000 --waves 200
    scripts/dev shell python -m tests.chaos.run --jobs 20000 --seed 1234     # replay a seed
    scripts/dev shell python -m tests.chaos.run --jobs 40000 --waves 16 --defaults --settle  # recovery

It starts its own MariaDB server (a private one on a free port, which the soak crashes, restarts
and read-locks) and a Sentinel-managed Redis (a master, a replica and three Sentinels on free ports:
tests/chaos/sentinel.py; --failovers SENTINEL FAILOVERs, and the Redis restarts restart the
master in place, empty), prints the faults as they are injected and the verdicts at the
end (jobs, the cluster group's messages, then the re-scan sources that ran beside them) with each
fault's recovery and the limits (the row-mode source's rate, the limited task's max_running_per_key), and
exits 1 unless nothing was lost, acked twice or unexpected and no limit was exceeded. --defaults runs
the processes with duecast's default leases (15 s), batches (2,000, in job runs of 500), visibility
timeout (60 s) and worker heartbeats (dead after 15 s) instead of the suite's short ones (3 s, 100 in
runs of 25, 5 s, 2 s);
--settle measures each fault's recovery alone. --json writes the figures.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import signal
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from tests.chaos.app import RESCAN_ROWS
from tests.chaos.checker import Verdict, WorkRecovery
from tests.chaos.harness import Chaos
from tests.chaos.private_mariadb import running_with
from tests.chaos.rescan_checker import RescanVerdict
from tests.chaos.sentinel import SentinelRedis
from tests.chaos.soak import Plan, limits_verdicts, soak
from tests.faults.procs import Procs


def _exit_on_sigterm(signum: int, _frame: object) -> None:
    raise SystemExit(128 + signum)  # unwinds through main's finally: processes, Redis, database


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--jobs", type=int, default=1_000_000)
    p.add_argument("--waves", type=int, default=200, help="jobs arrive in this many waves, a fault each")
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--rescan-rows", type=int, default=2000, help="rows of the row-mode re-scan source")
    p.add_argument("--range-rows", type=int, default=5000, help="rows of the range-mode re-scan source")
    p.add_argument("--defaults", action="store_true", help="duecast's default leases, batches, timeouts")
    p.add_argument("--settle", action="store_true", help="each fault waits for the last one's work")
    p.add_argument("--server-faults", type=int, default=2, help="MariaDB restarts, and as many read locks")
    p.add_argument("--mariadb-down-s", type=float, default=10.0, help="how long each restart keeps it down")
    p.add_argument("--ack-stops", type=int, default=1, help="workers SIGSTOPped inside an ack transaction")
    p.add_argument("--failovers", type=int, default=1, help="SENTINEL FAILOVERs of the soak's Redis")
    p.add_argument("--read-lock-s", type=float, help="how long each read lock lasts (default: lease + 1 s)")
    p.add_argument("--json", type=Path)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    args = parse(argv)
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1 << 31)
    tmp = Path(tempfile.mkdtemp(prefix="duecast-chaos-"))
    lease_s, pop_batch = (15.0, 2000) if args.defaults else (3.0, 100)
    plan = Plan(
        waves=args.waves,
        mariadb_restarts=args.server_faults,
        read_locks=args.server_faults,
        ack_stops=args.ack_stops,
        failovers=args.failovers,
        mariadb_down_s=args.mariadb_down_s,
        read_lock_s=args.read_lock_s or lease_s + 1,
        settle=args.settle,
        fast_death=not args.defaults,
    )
    redis = SentinelRedis(tmp)
    procs = Procs(tmp)
    try:
        with running_with(tmp, "duecast_chaos") as server:
            try:
                redis.start()
                mysql = server.settings("duecast_chaos")
                jobs = {"visibility_timeout_s": 60.0} if args.defaults else {}
                chaos = Chaos(mysql, redis, procs, tmp, seed, lease_s, jobs, pop_batch=pop_batch)
                started = time.monotonic()
                sizes = {"rows": args.rescan_rows, "range_rows": args.range_rows}
                took = soak(chaos, args.jobs, plan, rescan=sizes, server=server)
                return report(chaos, args, sizes, took, time.monotonic() - started)
            finally:
                procs.kill_all()
                redis.kill()
    finally:
        shutil.rmtree(tmp / "mariadb-data", ignore_errors=True)  # the processes' logs stay in tmp


def report(chaos: Chaos, args: argparse.Namespace, sizes: dict[str, int], took: float, wall: float) -> int:
    verdict, rescan, work = chaos.verdict(), chaos.rescan_verdict(), chaos.work_recovery()
    messages = chaos.message_verdict()
    rate, running = limits_verdicts(chaos)
    faults = Counter(f.kind for f in chaos.faults)
    print(verdict.summary())
    print("cluster group:", messages.summary())
    print(rescan.summary())
    assert chaos.rescan is not None
    print(f"{RESCAN_ROWS}:", rate.summary(chaos.rescan.rate), "; over:", rate.over or "nothing")
    print("limited task:", running.summary(), "; over:", running.over or "nothing")
    print(
        f"{len(chaos.healthy):,} jobs in {took:.0f}s ({len(chaos.healthy) / took:,.0f} jobs/s) under faults:"
    )
    for kind, n in sorted(faults.items()):
        print(f"  {kind}: {n}")
    print("the jobs and messages a fault caught in workers' hands, all acked after it within:")
    for line in work.lines():
        print(f"  {line}")
    print("a corrupt hold handled / a new master taking writes, within (s):", chaos.measured)
    print("every re-scan row checked again after a fault within (s):")
    medians = rescan.median_recovery()
    for kind, worst in sorted(rescan.worst_recovery().items()):
        print(f"  {kind}: median {medians.get(kind, float('nan')):.1f}, worst {_seconds(worst)}")
    if args.json:
        figures = {
            "seed": chaos.seed,
            "args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
            "jobs": len(chaos.healthy),
            "seconds": round(wall, 1),
            "faults": dict(faults),
            **_verdict_figures(verdict),
            "messages": {"expected": messages.expected, **_verdict_figures(messages)},
            "held_work_recovery_s": _work_figures(work),
            "measured_s": {k: [round(v, 2) for v in vs] for k, vs in chaos.measured.items()},
            "rescan": _rescan_figures(rescan, sizes),
            "limits": {
                "rate": {f"claims_{w:g}s": most for w, (most, _, _) in rate.windows.items()}
                | {"starts_1s": rate.starts[0], "over": rate.over},
                "running": {k: most for k, (most, _) in running.most.items()} | {"over": running.over},
            },
        }
        args.json.write_text(json.dumps(figures, indent=2) + "\n")
    held = not (rate.over or running.over)
    return 0 if verdict.ok and messages.ok and rescan.ok and held else 1


def _verdict_figures(v: Verdict) -> dict[str, object]:
    return {
        "lost": len(v.lost),
        "double_ack": len(v.double_ack),
        "redundant": len(v.redundant),
        "redundant_causes": dict(Counter(v.redundant.values())),
        "unexpected": v.unexpected[:50],
    }


def _work_figures(w: WorkRecovery) -> dict[str, object]:
    medians, counts = w.medians(), w.by_kind()
    return {
        f"{kind} {source}": {
            "holdings": len(counts[(kind, source)]),
            "median": _round(medians.get((kind, source))),
            "worst": _round(worst),
        }
        for (kind, source), worst in sorted(w.worst().items())
    }


def _seconds(value: float | None) -> str:
    return "never" if value is None else f"{value:.1f}"


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 2)


def _rescan_figures(v: RescanVerdict, sizes: dict[str, int]) -> dict[str, object]:
    medians = v.median_recovery()
    return {
        **sizes,
        "checks": dict(v.checks),
        "row_runs": v.runs,
        "lost": len(v.lost),
        "double_ack": len(v.double_ack),
        "redundant": len(v.redundant),
        "redundant_under_one_attempt": v.repeated,
        "redundant_causes": dict(Counter(v.redundant.values())),
        "redundant_by_source": dict(Counter(source for source, _, _ in v.redundant)),
        "unexpected": v.unexpected[:50],
        "recovery_s": {
            kind: {"median": _round(medians.get(kind)), "worst": _round(worst)}
            for kind, worst in v.worst_recovery().items()
        },
    }


if __name__ == "__main__":
    sys.exit(main())
