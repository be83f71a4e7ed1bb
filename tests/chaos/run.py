"""The chaos suite's long version: the soak scenario at full size, from the command line.

    scripts/dev shell python -m tests.chaos.run --jobs 1000000 --waves 200
    scripts/dev shell python -m tests.chaos.run --jobs 20000 --seed 1234     # replay a seed

It works in its own database (duecast_chaos_<random>, dropped afterwards) and a private
redis-server on a free port, prints the faults as they are injected and the verdict at the end,
and exits 1 unless nothing was lost, acked twice or unexpected. --json writes the figures.
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

from shared.db import connect
from shared.settings import Settings
from tests.chaos.harness import Chaos, soak
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
        took = soak(chaos, args.jobs, waves=args.waves)
        verdict = chaos.verdict()
        faults = Counter(f.kind for f in chaos.faults)
        print(verdict.summary())
        print(
            f"{len(chaos.healthy):,} jobs in {took:.0f}s "
            f"({len(chaos.healthy) / took:,.0f} jobs/s) under faults:"
        )
        for kind, n in sorted(faults.items()):
            print(f"  {kind}: {n}")
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
                    },
                    indent=2,
                )
                + "\n"
            )
        return 0 if verdict.ok else 1
    finally:
        procs.kill_all()
        if chaos is not None:
            chaos.close()
        redis.kill()
        with admin.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS `{mysql.database}`")
        admin.close()


if __name__ == "__main__":
    sys.exit(main())
