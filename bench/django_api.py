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
atomic() blocks of --per-transaction tasks. The duecast ways also report a steady rate, from the
first jobs done to the last: at 20,000 no-op tasks, starting the processes takes about as long as
the drain itself, so the drain from the workers' start mostly measures the start. Ratios are each
run's (both drains of a run see the same moment of a shared machine), then their median.

    scripts/dev shell python bench/django_api.py                 # 20,000 tasks, 2 workers, 3 runs
    scripts/dev shell python bench/django_api.py --jobs 5000 --runs 1

Runs in database duecast_bench / key prefix duecast-bench (bench/harness.py), or another of the
benchmark namespace (DUECAST_MYSQL__DATABASE=duecast_bench_x DUECAST_REDIS__KEY_PREFIX=duecast-bench-x);
it empties the jobs table and django-tasks-db's table there. Needs the bench extra (django-tasks-db).
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


def duecast_drain(settings: Settings, args: argparse.Namespace, logs: Path, app: str) -> dict[str, float]:
    """One dispatcher and --workers duecast workers, until the jobs table is empty: the seconds from
    their start (drain_s); the steady part, from when the first jobs were done (steady_s, and the
    jobs left then, steady_jobs); the workers' CPU seconds, all (worker_cpu_s) and in the steady part
    (steady_cpu_s). A drain of 20,000 no-op jobs takes about as long as starting the processes."""
    logs.mkdir(exist_ok=True)
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
        first: tuple[float, int, float] | None = None  # when the count first fell, what was left, CPU
        cpu = 0.0
        try:
            with poll.cursor() as cur:
                while True:
                    # COUNT until the first jobs are done (a few ms on 20,000 rows), then EXISTS.
                    cur.execute(
                        f"SELECT COUNT(*) FROM {table}"
                        if first is None
                        else f"SELECT EXISTS (SELECT 1 FROM {table})"
                    )
                    row = cur.fetchone()
                    now = time.perf_counter()
                    if row is not None and not row[0]:
                        since, left, cpu_then = first or (now, 0, cpu)
                        return {
                            "drain_s": now - started,
                            "steady_s": now - since,
                            "steady_jobs": left,
                            "worker_cpu_s": cpu,
                            "steady_cpu_s": cpu - cpu_then,
                        }
                    cpu = sum(v for k, v in fleet.cpu_seconds().items() if k.startswith("worker"))
                    if first is None and row is not None and row[0] < args.jobs:
                        first = (now, int(row[0]), cpu)
                    if now - started > args.timeout or not fleet.alive():
                        raise SystemExit(f"drain did not finish in {args.timeout:.0f}s; logs: {logs}")
                    time.sleep(0.02)
        finally:
            fleet.stop()


def run(settings: Settings, args: argparse.Namespace) -> list[dict[str, Any]]:
    results = []
    for n in range(args.runs):
        logs = Path(tempfile.mkdtemp(prefix="duecast-django-bench-"))
        row: dict[str, Any] = {"run": n + 1, "jobs": args.jobs}
        if "reference" in args.ways:
            prepare(settings)
            row["reference_enqueue_s"] = django_enqueue(args.jobs, args.per_transaction, "ref")
            row["reference_drain_s"] = reference_drain(args, logs)
        if "django" in args.ways:
            prepare(settings)
            row["django_enqueue_s"] = django_enqueue(args.jobs, args.per_transaction, "default")
            drained = duecast_drain(settings, args, logs / "django", args.django_app)
            row.update({f"django_{k}": v for k, v in drained.items()})
        if "duecast" in args.ways:
            prepare(settings)
            row["duecast_enqueue_s"] = own_enqueue(settings, args.jobs)
            drained = duecast_drain(settings, args, logs / "duecast", "bench_jobs_app")
            row.update({f"duecast_{k}": v for k, v in drained.items()})
        results.append(row)
        print(", ".join(f"{k} {v:.2f}" for k, v in row.items() if k not in ("run", "jobs")), file=sys.stderr)
    return results


def drain_rate(r: dict[str, Any], way: str) -> float | None:
    """Tasks/s of a run's drain, from the workers' start (None if not measured)."""
    seconds = r.get(f"{way}_drain_s")
    return r["jobs"] / seconds if seconds else None


def steady_rate(r: dict[str, Any], way: str) -> float | None:
    """Tasks/s from the first jobs done to the last: the drain without the processes' start-up."""
    seconds = r.get(f"{way}_steady_s")
    return r[f"{way}_steady_jobs"] / seconds if seconds else None


def worker_cpu_us(r: dict[str, Any], way: str) -> float | None:
    """The workers' CPU per task in the steady part, µs (start-up left out): less sensitive than the
    wall clock to what else runs on a shared machine."""
    seconds, jobs = r.get(f"{way}_steady_cpu_s"), r.get(f"{way}_steady_jobs")
    return seconds / jobs * 1e6 if seconds and jobs else None


def median_of(results: list[dict[str, Any]], rate: Any, way: str, base: str | None = None) -> float | None:
    """The median rate of `way`, or with `base` the median of each run's ratio (same run: the
    machine is shared, and a run's two drains see the same moment of it)."""
    values = []
    for r in results:
        value, under = rate(r, way), rate(r, base) if base else 1.0
        if value is not None and under:
            values.append(value / under)
    return statistics.median(values) if values else None


def table(args: argparse.Namespace, results: list[dict[str, Any]]) -> Table:
    t = Table(
        title=f"Django's task API: {args.jobs:,} no-op tasks, {args.workers} workers (median of "
        f"{len(results)} runs; ratios: of each run's; steady: from the first jobs done to the last)"
    )
    cols = (
        "way",
        "enqueue tasks/s",
        "drain tasks/s",
        "vs reference",
        "vs own API",
        "steady tasks/s",
        "vs own API",
        "steady CPU µs/task",
        "own / this",
    )
    for col in cols:
        t.add_column(col, justify="right")
    labels = {
        "reference": "django-tasks-db (db_worker)",
        "django": "duecast, Django backend",
        "duecast": "duecast, its own API",
    }

    def cell(value: float | None, fmt: str = ",.0f") -> str:
        return "-" if value is None else format(value, fmt)

    for way in args.ways:
        enq = statistics.median(args.jobs / r[f"{way}_enqueue_s"] for r in results)
        t.add_row(
            labels[way],
            f"{enq:,.0f}",
            cell(median_of(results, drain_rate, way)),
            cell(median_of(results, drain_rate, way, "reference"), ".2f"),
            cell(median_of(results, drain_rate, way, "duecast"), ".2f"),
            cell(median_of(results, steady_rate, way)),
            cell(median_of(results, steady_rate, way, "duecast"), ".2f"),
            cell(median_of(results, worker_cpu_us, way), ".1f"),
            cell(1 / v if (v := median_of(results, worker_cpu_us, way, "duecast")) else None, ".2f"),
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
        "--django-app",
        default="duecast.integrations.django.worker",
        help="the Django way's worker app (another module of yours, to try a variant)",
    )
    p.add_argument(
        "--ways", nargs="+", choices=WAYS, default=list(WAYS), help="which to measure (default: all)"
    )
    args = p.parse_args(argv)
    return harness.run_and_report(args, run, table)


if __name__ == "__main__":
    sys.exit(main())
