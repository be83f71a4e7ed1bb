"""The measuring parts of bench/latency.py: the stamp file the handler writes, the paced producer,
each phase's summary, and the fleet's set-up and warm-up.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import harness
from latency_app import STAMP_FILE_ENV
from rich.console import Console
from rich.progress import Progress

from duecast import Enqueuer, Job
from duecast.cli.demo.fleet import Fleet
from duecast.shared.fanout.client import connect_redis
from duecast.shared.identifiers import quote
from duecast.shared.settings import JOBS_SOURCE, Settings
from duecast.shared.storage.admin import migrate
from duecast.shared.storage.db import connect

BENCH_DIR = Path(__file__).resolve().parent
APP = "latency_app"
TASK = "stamp"
POLL_S = 0.05
RATE_TOLERANCE = 0.95  # a phase counts only if the producer kept within 5% of the asked rate


@dataclass
class Stamps:
    """Reads the stamp file as it grows: job i -> (t_sent, t_start) of its first run."""

    path: Path
    offset: int = 0
    runs: dict[int, tuple[float, float]] = field(default_factory=dict)
    duplicates: int = 0
    pids: Counter[int] = field(default_factory=Counter)

    def poll(self) -> None:
        if not self.path.exists():
            return
        with self.path.open("rb") as f:
            f.seek(self.offset)
            data = f.read()
        done = data.rfind(b"\n") + 1  # a line still being written waits for the next poll
        self.offset += done
        for line in data[:done].splitlines():
            i, sent, start, pid = line.split()
            if int(i) in self.runs:
                self.duplicates += 1  # at-least-once: only the first run counts for latency
                continue
            self.runs[int(i)] = (float(sent), float(start))
            self.pids[int(pid)] += 1

    def wait_for(self, ids: range, timeout_s: float) -> int:
        """Poll until every id in `ids` started or `timeout_s` passed; returns how many are missing."""
        deadline = time.monotonic() + timeout_s
        while True:
            self.poll()
            missing = sum(1 for i in ids if i not in self.runs)
            if missing == 0 or time.monotonic() >= deadline:
                return missing
            time.sleep(POLL_S)


@dataclass
class Load:
    """How one phase of enqueueing went: commit time per job, and how far behind schedule it fell."""

    rate: float
    ids: range
    committed: dict[int, float] = field(default_factory=dict)  # job i -> time.time() after COMMIT
    max_lag_s: float = 0.0


def produce(settings: Settings, load: Load, offsets: list[int], batch_s: float, start: float) -> None:
    """Enqueue the jobs at `offsets` (0-based within the phase) on their schedule from `start`
    (time.monotonic()); one thread, one connection."""
    conn = connect(settings.mysql)
    client = connect_redis(settings.redis)
    enqueuer = Enqueuer(settings, client, tasks=[TASK])
    first = load.ids.start
    k = 0
    try:
        while k < len(offsets):
            due = start + offsets[k] / load.rate
            if batch_s:  # the next batch tick at or after the job's due time
                due = start + math.ceil(offsets[k] / load.rate / batch_s) * batch_s
            time.sleep(max(0.0, due - time.monotonic()))
            now = time.monotonic()
            load.max_lag_s = max(load.max_lag_s, now - due)
            n = 1
            if batch_s:  # everything due by now, in one transaction
                while k + n < len(offsets) and start + offsets[k + n] / load.rate <= now:
                    n += 1
            sent = time.time()
            jobs = [Job(TASK, {"i": first + o, "t_sent": sent}) for o in offsets[k : k + n]]
            enqueuer.enqueue_many(jobs, conn=conn)
            conn.commit()
            committed = time.time()
            enqueuer.wake()
            for o in offsets[k : k + n]:
                load.committed[first + o] = committed
            k += n
    finally:
        conn.close()
        client.close()


def run_load(settings: Settings, args: argparse.Namespace, rate: float, first: int, console: Console) -> Load:
    count = max(1, round(rate * args.seconds))
    total = Load(rate, range(first, first + count))
    parts = [Load(rate, total.ids) for _ in range(args.producers)]
    start = time.monotonic() + 0.5  # one schedule for every producer, once they have connected
    threads = [
        threading.Thread(
            target=produce,
            args=(settings, part, list(range(p, count, args.producers)), args.batch_ms / 1000, start),
            name=f"producer-{p}",
            daemon=True,
        )
        for p, part in enumerate(parts)
    ]
    with Progress(console=console, transient=True) as bar:
        task = bar.add_task(f"enqueueing at {rate:,.0f} jobs/s", total=count)
        for t in threads:
            t.start()
        while any(t.is_alive() for t in threads):
            bar.update(task, completed=sum(len(p.committed) for p in parts))
            time.sleep(0.25)
    for part in parts:
        total.committed.update(part.committed)
        total.max_lag_s = max(total.max_lag_s, part.max_lag_s)
    if len(total.committed) != count:
        raise SystemExit(f"a producer failed: {len(total.committed)} of {count} jobs enqueued")
    return total


def summarise(load: Load, stamps: Stamps, missing: int, target_ms: float) -> dict[str, Any]:
    done = [i for i in load.ids if i in stamps.runs]
    lat = sorted((stamps.runs[i][1] - load.committed[i]) * 1000 for i in done)
    from_call = sorted((stamps.runs[i][1] - stamps.runs[i][0]) * 1000 for i in done)
    begin = min(load.committed.values())
    per_second: dict[int, list[float]] = {}
    for i in done:
        second = int(load.committed[i] - begin)
        per_second.setdefault(second, []).append((stamps.runs[i][1] - load.committed[i]) * 1000)
    timeline = [
        {"second": s, "p50_ms": harness.quantile(sorted(v), 0.5), "p99_ms": harness.quantile(sorted(v), 0.99)}
        for s, v in sorted(per_second.items())
    ]
    p99 = harness.quantile(lat, 0.99)
    # From the first COMMIT to the last: thread start-up and the final poll do not count.
    span_s = max(load.committed.values()) - begin
    enqueue_per_s = (len(load.ids) - 1) / span_s if span_s > 0 else math.nan
    rate_reached = enqueue_per_s >= RATE_TOLERANCE * load.rate or len(load.ids) < 2
    return {
        "rate": load.rate,
        "enqueued": len(load.ids),
        "enqueue_per_s": enqueue_per_s,
        "max_producer_lag_ms": load.max_lag_s * 1000,
        "started": len(done),
        "missing": missing,
        "latency_ms": {
            "min": lat[0] if lat else math.nan,
            "p50": harness.quantile(lat, 0.50),
            "p90": harness.quantile(lat, 0.90),
            "p99": p99,
            "p999": harness.quantile(lat, 0.999),
            "max": lat[-1] if lat else math.nan,
            "mean": statistics.fmean(lat) if lat else math.nan,
        },
        "from_call_p99_ms": harness.quantile(from_call, 0.99),
        "rate_reached": rate_reached,
        "meets_target": bool(lat) and missing == 0 and rate_reached and p99 <= target_ms,
        "timeline": timeline,
        "cdf_ms": lat[:: max(1, len(lat) // 2000)],  # at most ~2,000 points for the chart
    }


def prepare(settings: Settings) -> None:
    """The jobs table migrated and empty, the jobs keys of this prefix gone."""
    migrate.apply(settings)
    conn = connect(settings.mysql)
    try:
        with conn.cursor() as cur:
            cur.execute(f"TRUNCATE TABLE {quote(settings.jobs.table)}")
    finally:
        conn.close()
    harness.clear_keys(settings, [f"{JOBS_SOURCE}.default"])


def start_fleet(args: argparse.Namespace, logs: Path, stamp_file: Path) -> Fleet:
    config = logs / "latency.toml"
    config.write_text(f'[worker]\nsources = ["{JOBS_SOURCE}"]\nconcurrency = {args.concurrency}\n')
    path = os.pathsep.join(p for p in (str(BENCH_DIR), os.environ.get("PYTHONPATH", "")) if p)
    fleet = Fleet(config, APP, logs, extra_env={"PYTHONPATH": path, STAMP_FILE_ENV: str(stamp_file)})
    fleet.start_dispatcher()
    for i in range(args.workers):
        fleet.start_worker(f"worker-{i + 1}")
    return fleet


def warm_up(settings: Settings, stamps: Stamps, fleet: Fleet, logs: Path) -> None:
    """A few jobs through the whole path, so the measured phases start with every process ready."""
    client = connect_redis(settings.redis)
    enqueuer = Enqueuer(settings, client, tasks=[TASK])
    try:
        enqueuer.enqueue_many(Job(TASK, {"i": i, "t_sent": time.time()}) for i in range(-20, 0))
    finally:
        enqueuer.db.close()
        client.close()
    if stamps.wait_for(range(-20, 0), 60.0) or not fleet.alive():
        raise SystemExit(f"warm-up jobs did not run within 60 s; process logs: {logs}")
