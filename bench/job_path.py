"""Benchmark: a worker's Python per job, in one process with no I/O: a run's members as its packed read
returns them (one JSON array, JOB_COLUMNS per job), made rows, then the Registry's job handler on a
no-op task, as a handler thread calls it. For an A/B of code that touches every run (bench/ab.py
--benches path), where the drain's wall clock on a shared machine is too coarse; CPU time per job.

    scripts/dev shell python bench/job_path.py                     # 200,000 jobs, 5 runs
    python bench/ab.py --before ../duecast-before --benches path   # this script in both checkouts

Imports only what every checkout since the runs (issue 22) has, so ab.py runs it against older code.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from duecast import Registry
from duecast.shared.queries.jobs import JOB_COLUMNS
from duecast.shared.settings import JOBS_SOURCE

RUN = 500  # jobs per run (the dispatcher's claim)
VALUES = {
    "id": 0,
    "dc_attempt": 0,
    "task": "noop",
    "payload": '{"i": 1}',
    "errors": 0,
    "max_attempts": 20,
    "interruptions": 0,
    "queue": "default",
    "created_at": "2026-11-27 12:00:00.000000",
}  # a column not named here (a later one) is NULL, as a job enqueued with no middleware has it


def packed_runs(jobs: int) -> list[str]:
    """Each run's packed read, as MariaDB returns it: one JSON text of [values...] per member."""
    runs = []
    for lo in range(0, jobs, RUN):
        members = [[i if c == "id" else VALUES.get(c) for c in JOB_COLUMNS] for i in range(lo, lo + RUN)]
        runs.append(json.dumps(members))
    return runs


def one_run(jobs: int) -> float:
    """CPU seconds per job: parse each run's members and call the no-op task on each, as a worker."""
    handlers = Registry()
    handlers.task("noop")(lambda payload: None)
    handler = handlers.handler(JOBS_SOURCE)
    runs = packed_runs(jobs)
    started = time.process_time()
    for packed in runs:
        rows = [dict(zip(JOB_COLUMNS, values, strict=True)) for values in json.loads(packed)]
        for row in rows:
            row["dc_attempt"] = int(row["dc_attempt"]) + 1
        for outcome in handler.run(rows):
            if isinstance(outcome, BaseException):
                raise outcome
    return (time.process_time() - started) / jobs


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--jobs", type=int, default=200_000)
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--json", type=Path)
    args = p.parse_args(argv)
    results: list[dict[str, Any]] = [
        {"run": n + 1, "cpu_us_per_job": one_run(args.jobs) * 1e6} for n in range(args.runs)
    ]
    for r in results:
        print(f"run {r['run']}: {r['cpu_us_per_job']:.2f} µs of CPU per job", file=sys.stderr)
    print(f"median: {statistics.median(r['cpu_us_per_job'] for r in results):.2f} µs of CPU per job")
    if args.json:
        args.json.write_text(
            json.dumps({"args": {k: str(v) for k, v in vars(args).items()}, "results": results})
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
