"""Benchmark: Django's task API on duecast against django-tasks-db's reference database backend, and
against duecast's own API, on the same MariaDB in one run (issue 23).

Each of three ways enqueues --jobs no-op tasks, then --workers worker processes drain them; the
clock of a drain starts when the workers do and stops when none is left:
  reference   `noop.using(backend="ref").enqueue(i)` (django-tasks-db), drained by --workers
              `manage.py db_worker --batch` processes (its documented worker);
  django      `noop.enqueue(i)` through duecast.integrations.django.DuecastBackend, drained by one
              dispatcher and --workers `duecast worker --app duecast.integrations.django.worker`;
  duecast     Enqueuer.enqueue_many of the same number of jobs, drained by the same fleet running
              a plain duecast task.
Django enqueues one task per call (its API has no batch): both Django ways enqueue inside
atomic() blocks of --per-transaction tasks.

    scripts/dev shell python bench/django_api.py                 # 20,000 tasks, 2 workers, 3 runs
    scripts/dev shell python bench/django_api.py --jobs 5000 --runs 1

Runs in database duecast_bench / key prefix duecast-bench (bench/harness.py); it empties the jobs
table and django-tasks-db's table there. Needs the bench extra (django-tasks-db).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import closing
from pathlib import Path
from typing import Any

import harness
from rich.table import Table

from duecast.cli.demo.fleet import Fleet
from duecast.shared.api.enqueue import Enqueuer, Job
from duecast.shared.fanout.client import connect_redis
from duecast.shared.identifiers import quote
from duecast.shared.settings import JOBS_SOURCE, Settings
from duecast.shared.storage.admin import migrate
from duecast.shared.storage.db import connect

BENCH_DIR = Path(__file__).resolve().parent
PROJECT = BENCH_DIR / "django_bench"
WAYS = ("reference", "django", "duecast")
REF_TABLE = "django_tasks_database_dbtaskresult"
ENQUEUE = """
import sys, time
import django
django.setup()
from django.db import transaction
from djbench.tasks import noop
jobs, per, backend = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
task = noop.using(backend=backend)
started = time.perf_counter()
for lo in range(0, jobs, per):
    with transaction.atomic():
        for i in range(lo, min(jobs, lo + per)):
            task.enqueue(i)
print(time.perf_counter() - started)
"""


def env() -> dict[str, str]:
    return {
        **os.environ,
        "PYTHONPATH": f"{PROJECT}:{BENCH_DIR}:{os.environ.get('PYTHONPATH', '')}",
        "DJANGO_SETTINGS_MODULE": "djbench.settings",
    }


def prepare(settings: Settings) -> None:
    migrate.apply(settings)
    subprocess.run([sys.executable, "manage.py", "migrate", "-v", "0"], cwd=PROJECT, env=env(), check=True)
    with closing(connect(settings.mysql)) as conn, conn.cursor() as cur:
        cur.execute(f"TRUNCATE TABLE {quote(settings.jobs.table)}")
        cur.execute(f"TRUNCATE TABLE {REF_TABLE}")
    harness.clear_keys(settings, [f"{JOBS_SOURCE}.{q}" for q in settings.jobs.queues])


def django_enqueue(jobs: int, per: int, backend: str) -> float:
    done = subprocess.run(
        [sys.executable, "-c", ENQUEUE, str(jobs), str(per), backend],
        cwd=PROJECT,
        env=env(),
        check=True,
        capture_output=True,
        text=True,
    )
    return float(done.stdout.strip().splitlines()[-1])


def own_enqueue(settings: Settings, jobs: int) -> float:
    enqueuer = Enqueuer(settings, connect_redis(settings.redis), tasks=["noop"])
    started = time.perf_counter()
    for lo in range(0, jobs, 10_000):
        enqueuer.enqueue_many(Job("noop", {"i": i}) for i in range(lo, min(jobs, lo + 10_000)))
    return time.perf_counter() - started


def reference_drain(args: argparse.Namespace, logs: Path) -> float:
    """django-tasks-db: --workers `db_worker --batch` processes, until every one has exited."""
    started = time.perf_counter()
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "manage.py",
                "db_worker",
                "--backend",
                "ref",
                "--batch",
                "--no-startup-delay",
                "--queue-name",
                "*",
                "--worker-id",
                f"ref-{i}",
            ],
            cwd=PROJECT,
            env=env(),
            stdout=(logs / f"ref-{i}.log").open("wb"),
            stderr=subprocess.STDOUT,
        )
        for i in range(args.workers)
    ]
    for proc in procs:
        if proc.wait(timeout=args.timeout) != 0:
            raise SystemExit(f"db_worker exited {proc.returncode}; logs in {logs}")
    return time.perf_counter() - started


def duecast_drain(settings: Settings, args: argparse.Namespace, logs: Path, app: str) -> float:
    """One dispatcher and --workers duecast workers, until the jobs table is empty."""
    config = logs / "jobs.toml"
    config.write_text(f'[worker]\nsources = ["{JOBS_SOURCE}"]\nconcurrency = {args.concurrency}\n')
    extra = {k: env()[k] for k in ("PYTHONPATH", "DJANGO_SETTINGS_MODULE")}
    fleet = Fleet(config, app, logs, extra_env=extra)
    table = quote(settings.jobs.table)
    with closing(connect(settings.mysql)) as poll:
        poll.autocommit(True)
        started = time.perf_counter()
        fleet.start_dispatcher()
        for i in range(args.workers):
            fleet.start_worker(f"worker-{i + 1}")
        try:
            with poll.cursor() as cur:
                while True:
                    cur.execute(f"SELECT EXISTS (SELECT 1 FROM {table})")
                    row = cur.fetchone()
                    if row is not None and not row[0]:
                        return time.perf_counter() - started
                    if time.perf_counter() - started > args.timeout or not fleet.alive():
                        raise SystemExit(f"drain did not finish in {args.timeout:.0f}s; logs: {logs}")
                    time.sleep(0.02)
        finally:
            fleet.stop()


def run(settings: Settings, args: argparse.Namespace) -> list[dict[str, Any]]:
    results = []
    for n in range(args.runs):
        logs = Path(tempfile.mkdtemp(prefix="duecast-django-bench-"))
        row: dict[str, Any] = {"run": n + 1}
        if "reference" in args.ways:
            prepare(settings)
            row["reference_enqueue_s"] = django_enqueue(args.jobs, args.per_transaction, "ref")
            row["reference_drain_s"] = reference_drain(args, logs)
        if "django" in args.ways:
            prepare(settings)
            row["django_enqueue_s"] = django_enqueue(args.jobs, args.per_transaction, "default")
            row["django_drain_s"] = duecast_drain(settings, args, logs, "duecast.integrations.django.worker")
        if "duecast" in args.ways:
            prepare(settings)
            row["duecast_enqueue_s"] = own_enqueue(settings, args.jobs)
            row["duecast_drain_s"] = duecast_drain(settings, args, logs, "bench_jobs_app")
        results.append(row)
        print(", ".join(f"{k} {v:.2f}" for k, v in row.items() if k != "run"), file=sys.stderr)
    return results


def table(args: argparse.Namespace, results: list[dict[str, Any]]) -> Table:
    t = Table(
        title=f"Django's task API: {args.jobs:,} no-op tasks, {args.workers} workers "
        f"(median of {len(results)} runs)"
    )
    for col in ("way", "enqueue tasks/s", "drain tasks/s", "drain vs reference", "drain vs own API"):
        t.add_column(col, justify="right")
    rate = {w: statistics.median(args.jobs / r[f"{w}_drain_s"] for r in results) for w in args.ways}

    def ratio(way: str, base: str) -> str:
        return f"{rate[way] / rate[base]:.2f}" if base in rate else "-"

    labels = {
        "reference": "django-tasks-db (db_worker)",
        "django": "duecast, Django backend",
        "duecast": "duecast, its own API",
    }
    for way in args.ways:
        enq = statistics.median(args.jobs / r[f"{way}_enqueue_s"] for r in results)
        t.add_row(
            labels[way], f"{enq:,.0f}", f"{rate[way]:,.0f}", ratio(way, "reference"), ratio(way, "duecast")
        )
    return t


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--jobs", type=int, default=20_000)
    p.add_argument("--per-transaction", type=int, default=1000, help="Django enqueues per atomic() block")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--concurrency", type=int, default=1, help="duecast handler threads per worker")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--timeout", type=float, default=600.0)
    p.add_argument("--json", type=Path)
    p.add_argument(
        "--ways", nargs="+", choices=WAYS, default=list(WAYS), help="which to measure (default: all)"
    )
    args = p.parse_args(argv)
    return harness.run_and_report(args, run, table)


if __name__ == "__main__":
    sys.exit(main())
