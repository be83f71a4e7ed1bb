"""The chaos suite's long version: the soak scenario at full size, from the command line.

    scripts/dev shell python -m tests.chaos.run --jobs 1000000 --waves 200
    scripts/dev shell python -m tests.chaos.run --jobs 20000 --seed 1234     # replay a seed

It works in its own database (duecast_chaos_<random>, dropped afterwards) and a private
redis-server on a free port, prints the faults as they are injected and the verdicts at the end
(jobs, then the re-scan sources that ran beside them), and exits 1 unless nothing was lost, acked
twice or unexpected. --json writes the figures.
"""

from __future__ import annotations

import argparse
import json
import random
import signal
import sys
import tempfile
import time
import uuid
from collections import Counter
from pathlib import Path

from duecast.shared.settings import Settings
from duecast.shared.storage.db import connect
from tests.chaos.harness import Chaos
from tests.chaos.rescan_checker import RescanVerdict
from tests.chaos.soak import soak
from tests.faults.private_redis import PrivateRedis
from tests.faults.procs import Procs


def _exit_on_sigterm(signum: int, _frame: object) -> None:
    raise SystemExit(128 + signum)  # unwinds through main's finally: processes, Redis, database


def main(argv: list[str] | None = None) -> int:
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--jobs", type=int, default=1_000_000)
    p.add_argument("--waves", type=int, default=200, help="jobs arrive in this many waves, a fault each")
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--rescan-rows", type=int, default=2000, help="rows of the row-mode re-scan source")
    p.add_argument("--range-rows", type=int, default=5000, help="rows of the range-mode re-scan source")
    p.add_argument("--json", type=Path)
    args = p.parse_args(argv)
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1 << 31)
    tmp = Path(tempfile.mkdtemp(prefix="duecast-chaos-"))
    mysql = Settings().mysql.model_copy(update={"database": f"duecast_chaos_{uuid.uuid4().hex[:6]}"})
    admin = connect(mysql, database=False)
    with admin.cursor() as cur:
        cur.execute(f"CREATE DATABASE `{mysql.database}` CHARACTER SET utf8mb4")
    redis = PrivateRedis(tmp)
    procs = Procs(tmp)
    chaos = None
    try:
        redis.start()
        chaos = Chaos(mysql, redis, procs, tmp, seed)
        started = time.monotonic()
        sizes = {"rows": args.rescan_rows, "range_rows": args.range_rows}
        took = soak(chaos, args.jobs, waves=args.waves, rescan=sizes)
        verdict = chaos.verdict()
        rescan = chaos.rescan_verdict()
        faults = Counter(f.kind for f in chaos.faults)
        print(verdict.summary())
        print(rescan.summary())
        print(
            f"{len(chaos.healthy):,} jobs in {took:.0f}s "
            f"({len(chaos.healthy) / took:,.0f} jobs/s) under faults:"
        )
        for kind, n in sorted(faults.items()):
            print(f"  {kind}: {n}")
        print("every re-scan row checked again after a fault within (s):")
        medians = rescan.median_recovery()
        for kind, worst in sorted(rescan.worst_recovery().items()):
            print(f"  {kind}: median {medians.get(kind, float('nan')):.1f}, worst {_seconds(worst)}")
        if args.json:
            args.json.write_text(
                json.dumps(
                    {
                        "seed": seed,
                        "jobs": len(chaos.healthy),
                        "seconds": round(time.monotonic() - started, 1),
                        "faults": dict(faults),
                        "lost": len(verdict.lost),
                        "double_ack": len(verdict.double_ack),
                        "redundant": len(verdict.redundant),
                        "redundant_causes": dict(Counter(verdict.redundant.values())),
                        "unexpected": verdict.unexpected[:50],
                        "rescan": _rescan_figures(rescan, sizes),
                    },
                    indent=2,
                )
                + "\n"
            )
        return 0 if verdict.ok and rescan.ok else 1
    finally:
        procs.kill_all()
        if chaos is not None:
            chaos.close()
        redis.kill()
        with admin.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS `{mysql.database}`")
        admin.close()


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
