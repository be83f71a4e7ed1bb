"""Benchmark: a worker's Python per job for a no-op Django task against duecast's own no-op task, in one
process with no servers: each run's packed read parsed into rows, then the jobs source's handler on
them, as a handler thread calls it (bench/job_path.py's path, with the Django app's task and payload).

Its figure for an A/B is instructions, not time: each kind run under callgrind draining the same jobs
once and three times, the difference of the two totals over the jobs between them is the per-job
cost, start-up and building the jobs cancelled, whatever else the machine does (about 10 minutes):

    scripts/dev shell python bench/django_path.py --instructions    # both kinds, under valgrind
    scripts/dev shell python bench/django_path.py --kind django --rounds 3   # CPU time, one kind
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
RUN = 500  # jobs per run (the dispatcher's claim)
DJANGO_TASK = "djbench.tasks.noop"


def setup_django() -> None:
    """The benchmark project's settings (bench/django_bench), set up as the Django worker app does;
    no connection is opened (a no-op task opens none)."""
    sys.path.insert(0, str(BENCH / "django_bench"))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "djbench.settings")
    os.environ.setdefault("DUECAST_MYSQL__DATABASE", "duecast_bench_path_unused")
    import django  # noqa: PLC0415

    django.setup()


def handler_for(kind: str, with_django: bool) -> tuple[Any, str, Callable[[int], str]]:
    """The jobs source's handler, the task name and the payload per job of `kind`."""
    from duecast.shared.settings import JOBS_SOURCE  # noqa: PLC0415

    if kind == "django" or with_django:
        setup_django()
    if kind == "django":
        from duecast.integrations.django.worker import handlers  # noqa: PLC0415

        def payload(i: int) -> str:
            return json.dumps({"task": DJANGO_TASK, "args": [i], "kwargs": {}})

        return handlers.handler(JOBS_SOURCE), "django", payload
    sys.path.insert(0, str(BENCH))
    from bench_jobs_app import handlers as own  # noqa: PLC0415

    return own.handler(JOBS_SOURCE), "noop", lambda i: json.dumps({"i": i})


def packed_runs(jobs: int, task: str, payload: Callable[[int], str]) -> list[str]:
    """Each run's packed read, as MariaDB returns it: one JSON text of [values...] per member."""
    from duecast.shared.queries.jobs import JOB_COLUMNS  # noqa: PLC0415

    values = {
        "dc_attempt": 0,
        "task": task,
        "errors": 0,
        "max_attempts": 20,
        "interruptions": 0,
        "queue": "default",
        "created_at": "2026-11-27 12:00:00.000000",
    }  # a column not named here is NULL (no middleware), "id" and "payload" per job
    runs = []
    for lo in range(0, jobs, RUN):
        members = [
            [i if c == "id" else payload(i) if c == "payload" else values.get(c) for c in JOB_COLUMNS]
            for i in range(lo, lo + RUN)
        ]
        runs.append(json.dumps(members))
    return runs


def drain(handler: Any, runs: list[str]) -> None:
    """Parse each run's members and call the task on each, as a worker (run_units._read_members)."""
    from duecast.shared.queries.jobs import JOB_COLUMNS  # noqa: PLC0415

    for packed in runs:
        rows = [dict(zip(JOB_COLUMNS, values, strict=True)) for values in json.loads(packed)]
        for row in rows:
            row["dc_attempt"] = int(row["dc_attempt"]) + 1
        for row in rows:
            handler.plan(row)  # the worker routes each row (event loop or thread, its time limit)
        for outcome in handler.run(rows):
            if isinstance(outcome, BaseException):
                raise outcome


def instructions(jobs: int) -> dict[str, float]:
    """Instructions per job of each kind (callgrind: 1 and 3 rounds of `jobs`, the difference)."""
    per_job = {}
    with tempfile.TemporaryDirectory() as tmp:
        for kind in ("own", "django"):
            totals = []
            for rounds in (1, 3):
                out = Path(tmp) / f"{kind}.{rounds}"
                cmd = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", sys.executable]
                cmd += [__file__, "--kind", kind, "--jobs", str(jobs), "--rounds", str(rounds)]
                done = subprocess.run(cmd, capture_output=True, text=True, check=True)
                found = re.search(r"Collected : (\d+)", done.stderr)
                assert found, done.stderr[-2000:]
                totals.append(int(found.group(1)))
            per_job[kind] = (totals[1] - totals[0]) / (2 * jobs)
            print(f"{kind}: {per_job[kind]:,.0f} instructions per job", flush=True)
    print(f"django - own: {per_job['django'] - per_job['own']:,.0f} instructions per job")
    return per_job


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--kind", choices=("own", "django"), default="django")
    p.add_argument("--jobs", type=int, default=5_000, help="jobs per round, after a warm-up run")
    p.add_argument("--rounds", type=int, default=1, help="times the same jobs are drained")
    p.add_argument("--with-django", action="store_true", help="set Django up for the own task too")
    p.add_argument("--instructions", action="store_true", help="both kinds under callgrind (valgrind)")
    args = p.parse_args(argv)
    if args.instructions:
        instructions(args.jobs)
        return 0
    handler, task, payload = handler_for(args.kind, args.with_django)
    drain(handler, packed_runs(RUN, task, payload))  # warm-up: first-use look-ups, caches
    runs = packed_runs(args.jobs, task, payload)
    started = time.process_time()
    for _ in range(args.rounds):
        drain(handler, runs)
    cpu = (time.process_time() - started) / (args.jobs * args.rounds)
    print(
        f"{args.kind}: {args.rounds} x {args.jobs} jobs, {cpu * 1e6:.2f} µs of CPU per job", file=sys.stderr
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
