"""Benchmark: how much a worker logs while the service its handlers call fails every call (issue 26).

Real processes, default settings but the source: one dispatcher and --workers workers (`--app
log_volume_app`), the README's re-scan (user_block_status, row mode, --users users every --period s)
and the job queue `default`, to which this script enqueues a steady --jobs-per-s trickle of `notify`
jobs. Every check and every job makes one aiohttp call (a pool of 100, a --timeout s total timeout)
to a service that fails them all (bench/log_volume_stub.py): half get HTTP 500, a quarter a refused
connection, a quarter no answer until the timeout. Each process writes its stdout and stderr to its
own file. After --minutes it prints, per process: log bytes, lines, the largest group of repeated
lines (records alike but for their numbers, traceback included) and the checks and jobs it attempted;
then each worker's log bytes per minute, so a slow leak shows. Exits 1 when a worker's log reaches
1 MB (issue 26's acceptance: under 1 MB in 10 minutes), 2 when a process exited before its stop.

    scripts/dev shell python bench/log_volume.py                  # 10 minutes
    scripts/dev shell python bench/log_volume.py --minutes 1 --json /tmp/log-volume.json

Runs in database duecast_bench / key prefix duecast-bench (bench/harness.py; set
DUECAST_MYSQL__DATABASE=duecast_bench_x and DUECAST_REDIS__KEY_PREFIX=duecast-bench-x for your own);
it rebuilds that database's user_block_status table and empties its jobs tables.
"""

from __future__ import annotations

import argparse
import json
import re
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import closing, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import harness
from log_volume_app import CALLS_ENV, REFUSED_ENV, SOURCE, TASK, TIMEOUT_ENV, URL_ENV
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from duecast.cli.demo.fleet import Fleet
from duecast.shared.api.enqueue import Enqueuer
from duecast.shared.fanout.client import connect_redis
from duecast.shared.identifiers import quote
from duecast.shared.process.runtime import build_queue, build_stores
from duecast.shared.queries.job_runs import RUN_ID_BASE
from duecast.shared.settings import JOBS_SOURCE, Settings, SourceSettings, load_settings
from duecast.shared.storage.admin import demo_table, migrate
from duecast.shared.storage.db import connect

BENCH_DIR = Path(__file__).resolve().parent
APP = "log_volume_app"
LIMIT_BYTES = 1_000_000  # a worker's log over the run: issue 26's bound
RECORD = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} (\w+) (\S+)\[\d+\] (.*)$")  # HUMAN_FORMAT


def source(period_s: float) -> SourceSettings:
    """The README's source: its five keys, every other one at its default."""
    return SourceSettings(
        name=SOURCE, table=SOURCE, id_column="user_id", due_column="updated_time", period_s=period_s
    )


def settings_toml(src: SourceSettings) -> str:
    keys = ("name", "table", "id_column", "due_column")
    return (
        "[[sources]]\n"
        + "".join(f'{k} = "{getattr(src, k)}"\n' for k in keys)
        + f"period_s = {src.period_s}\n"
    )


def prepare(settings: Settings, users: int, console: Console) -> None:
    """The table of `users` users, the schema, no jobs, and nothing dispatched or counted."""
    with Progress(console=console, transient=True) as bar:
        task = bar.add_task(f"preparing {users:,} users", total=users)
        demo_table.prepare(
            settings.mysql, users, settings.sources[0].period_s, lambda n: bar.advance(task, n)
        )
    migrate.apply(settings)
    with closing(connect(settings.mysql)) as conn, conn.cursor() as cur:
        for table in (settings.jobs.table, settings.jobs.runs_table):
            cur.execute(f"TRUNCATE TABLE {quote(table)}")
        # TRUNCATE resets AUTO_INCREMENT; run ids start above every job id (shared/storage/schema.py)
        cur.execute(f"ALTER TABLE {quote(settings.jobs.runs_table)} AUTO_INCREMENT = {RUN_ID_BASE}")
    harness.clear_keys(settings, [SOURCE, *queues(settings)])
    for store in build_stores(settings, settings.sources):
        store.reset_dispatched()
        store.close()


def queues(settings: Settings) -> list[str]:
    return [f"{JOBS_SOURCE}.{q}" for q in settings.jobs.queues]


@contextmanager
def failing_service() -> Iterator[tuple[str, str]]:
    """The stub's base URL, and one of a port nobody listens on (its calls are refused)."""
    proc = subprocess.Popen(
        [sys.executable, str(BENCH_DIR / "log_volume_stub.py")], stdout=subprocess.PIPE, text=True
    )
    try:
        line = proc.stdout.readline().split() if proc.stdout else []
        if line[:1] != ["ready"]:
            raise SystemExit(f"the failing stub did not start (exit code {proc.poll()})")
        with socket.socket() as s:  # bound, never listening, closed: connecting is refused
            s.bind(("127.0.0.1", 0))
            closed = s.getsockname()[1]
        yield f"http://127.0.0.1:{line[1]}", f"http://127.0.0.1:{closed}"
    finally:
        proc.terminate()
        proc.wait(10)


@dataclass
class Run:
    log_dir: Path
    minutes: list[dict[str, int]] = field(default_factory=list)  # each process's log size per minute
    enqueued: int = 0
    early_exits: list[str] = field(default_factory=list)
    exit_codes: dict[str, int] = field(default_factory=dict)
    pids: dict[str, int] = field(default_factory=dict)
    counters: dict[str, dict[str, int]] = field(default_factory=dict)  # Redis counters per source


def sizes(fleet: Fleet) -> dict[str, int]:
    return {name: _size(fleet.log_dir / f"{name}.log") for name in fleet.procs}


def _size(path: Path) -> int:
    return path.stat().st_size if path.exists() else 0


def run(settings: Settings, args: argparse.Namespace, console: Console) -> Run:
    """Prepare, start the service and the processes, trickle jobs in for --minutes, stop."""
    prepare(settings, args.users, console)
    out = Run(Path(tempfile.mkdtemp(prefix="duecast-bench-logs-")))
    config = out.log_dir / "settings.toml"
    config.write_text(settings_toml(settings.sources[0]))
    calls = out.log_dir / "calls"
    calls.mkdir()
    client = connect_redis(settings.redis)
    enqueuer = Enqueuer(settings, client, tasks=[TASK])
    with failing_service() as (url, refused):
        env = {"PYTHONPATH": str(BENCH_DIR), URL_ENV: url, REFUSED_ENV: refused,
               CALLS_ENV: str(calls), TIMEOUT_ENV: str(args.timeout)}  # fmt: skip
        fleet = Fleet(config, APP, out.log_dir, extra_env=env)
        fleet.start_dispatcher()
        for i in range(args.workers):
            fleet.start_worker(f"worker-{i + 1}")
        out.pids = {name: p.pid for name, p in fleet.procs.items()}
        try:
            trickle(fleet, enqueuer, args, out, console)
        finally:
            queue = build_queue(settings)
            out.counters = {s: queue.stats(s) for s in [SOURCE, *queues(settings)]}
            queue.client.close()
            out.exit_codes = fleet.stop()
            out.minutes.append(sizes(fleet))  # the stop's lines count too
            enqueuer.db.close()
            client.close()
    return out


def trickle(fleet: Fleet, enqueuer: Enqueuer, args: argparse.Namespace, out: Run, console: Console) -> None:
    """One job every 1/--jobs-per-s s, and every process's log size at each minute, until the end."""
    started = time.monotonic()
    end = started + args.minutes * 60
    next_job, next_minute = started, started + 60
    while (now := time.monotonic()) < end:
        if now >= next_job:
            enqueuer.enqueue(TASK, {"n": out.enqueued})
            out.enqueued += 1
            next_job += 1 / args.jobs_per_s
        if now >= next_minute:
            out.minutes.append(sizes(fleet))
            next_minute += 60
            done = ", ".join(f"{k} {v:,}" for k, v in out.minutes[-1].items())
            console.print(f"minute {len(out.minutes)}, log bytes so far: {done}")
        dead = [name for name in fleet.procs if name not in fleet.alive()]
        if dead:
            out.early_exits = [f"{name} exited early (log: {fleet.log_dir / f'{name}.log'})" for name in dead]
            return
        time.sleep(max(0.0, min(next_job, next_minute, end) - time.monotonic()))


@dataclass
class Group:
    """Log records alike but for their numbers: how many, their bytes, one of them."""

    count: int = 0
    bytes: int = 0
    sample: str = ""


def records(text: str) -> Iterator[tuple[str, str, int]]:
    """(key, first line, bytes) per record: a line in HUMAN_FORMAT and the lines under it (a
    traceback); the key is its level, logger and message with every number as #."""
    key, first, size = "", "", 0
    for line in text.splitlines(keepends=True):
        m = RECORD.match(line.rstrip("\n"))
        if m is None and key:
            size += len(line.encode())
            continue
        if key:
            yield key, first, size
        body = m.group(3) if m else line.strip()
        head = f"{m.group(1)} {m.group(2)} " if m else ""
        key, first, size = head + re.sub(r"\d+", "#", body)[:160], line.rstrip("\n"), len(line.encode())
    if key:
        yield key, first, size


def analyse(path: Path) -> dict[str, Any]:
    """A log's bytes, lines, records, and its three largest groups of alike records (by bytes)."""
    raw = path.read_bytes() if path.exists() else b""
    groups: dict[str, Group] = {}
    for key, first, size in records(raw.decode(errors="replace")):
        g = groups.setdefault(key, Group(sample=first))
        g.count += 1
        g.bytes += size
    top = sorted(groups.values(), key=lambda g: g.bytes, reverse=True)[:3]
    return {
        "bytes": len(raw),
        "lines": raw.count(b"\n"),
        "records": sum(g.count for g in groups.values()),
        "top": [{"count": g.count, "bytes": g.bytes, "sample": g.sample} for g in top],
    }


def attempts(calls_dir: Path, pid: int) -> dict[str, int]:
    """A worker's calls by kind and outcome (written by log_volume_app), e.g. {"check TimeoutError": 9}."""
    path = calls_dir / f"{pid}.json"
    return dict(json.loads(path.read_text())) if path.exists() else {}


def results(args: argparse.Namespace, out: Run) -> dict[str, Any]:
    roles = {}
    for name, pid in out.pids.items():
        calls = attempts(out.log_dir / "calls", pid)
        roles[name] = analyse(out.log_dir / f"{name}.log") | {
            "calls": calls,
            "checks": sum(n for k, n in calls.items() if k.startswith("check ")),
            "jobs": sum(n for k, n in calls.items() if k.startswith("job ")),
        }
    workers = {n: r["bytes"] for n, r in roles.items() if n.startswith("worker")}
    return {
        "log_dir": str(out.log_dir),
        "enqueued": out.enqueued,
        "roles": roles,
        "minutes": out.minutes,
        "counters": out.counters,
        "exit_codes": out.exit_codes,
        "early_exits": out.early_exits,
        "worst_worker_bytes": max(workers.values(), default=0),
        "over_limit": [n for n, b in workers.items() if b >= LIMIT_BYTES],
    }


def role_table(args: argparse.Namespace, r: dict[str, Any]) -> Table:
    t = Table(
        title=f"log volume, downstream failing 100% for {args.minutes:g} min: {args.workers} workers, "
        f"{args.users:,} users every {args.period:g} s, {args.jobs_per_s:g} jobs/s enqueued "
        f"({r['enqueued']:,}), client timeout {args.timeout:g} s"
    )
    for col in ("process", "log bytes", "lines", "records", "largest repeated group", "checks", "jobs"):
        t.add_column(col, justify="left" if col in ("process", "largest repeated group") else "right")
    for name, role in r["roles"].items():
        top = role["top"][0] if role["top"] else None
        group = f"{top['count']:,} x, {top['bytes']:,} B: {top['sample'][24:110]}" if top else "-"
        worker = name.startswith("worker")
        t.add_row(
            name, f"{role['bytes']:,}", f"{role['lines']:,}", f"{role['records']:,}", group,
            f"{role['checks']:,}" if worker else "-", f"{role['jobs']:,}" if worker else "-",
        )  # fmt: skip
    return t


def minute_table(r: dict[str, Any]) -> Table:
    names = list(r["roles"])
    t = Table(title="log bytes written per minute (the last row: after the last full minute, stop included)")
    t.add_column("minute", justify="right")
    for name in names:
        t.add_column(name, justify="right")
    before = dict.fromkeys(names, 0)
    for i, sample in enumerate(r["minutes"]):
        last = i == len(r["minutes"]) - 1
        t.add_row("rest" if last else str(i + 1), *(f"{sample[n] - before[n]:,}" for n in names))
        before = sample
    return t


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--minutes", type=float, default=10.0)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--users", type=int, default=20_000)
    p.add_argument("--period", type=float, default=10.0, help="the re-scan's period_s")
    p.add_argument("--jobs-per-s", type=float, default=2.0, help="jobs enqueued a second")
    p.add_argument("--timeout", type=float, default=5.0, help="the HTTP client's total timeout (README's)")
    p.add_argument("--json", type=Path)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    harness.use_bench_namespace()
    base = load_settings()
    settings = base.model_copy(update={"sources": [source(args.period)]})
    harness.check_namespace(settings)
    console = Console(stderr=True)
    with harness.exclusive(settings):
        r = results(args, run(settings, args, console))
    out = harness.report_console()
    out.print(role_table(args, r))
    out.print(minute_table(r))
    for name, role in r["roles"].items():
        out.print(
            f"{name}: "
            + "; ".join(f"{g['count']:,} x {g['bytes']:,} B {g['sample'][24:140]!r}" for g in role["top"])
        )
    out.print(f"calls per worker: { {n: role['calls'] for n, role in r['roles'].items() if role['calls']} }")
    out.print(f"Redis counters: {r['counters']}; logs in {r['log_dir']}")
    if args.json:
        harness.write_json(args.json, {"args": vars(args), "results": r})
    if bad := {name: code for name, code in r["exit_codes"].items() if code}:
        out.print(f"[yellow]warning[/yellow]: exit codes after SIGTERM: {bad}")
    if r["early_exits"]:
        out.print(f"[red]failed[/red]: {r['early_exits']}")
        return 2
    if r["over_limit"]:
        out.print(f"[red]over 1 MB[/red]: {r['over_limit']} (worst {r['worst_worker_bytes']:,} bytes)")
        return 1
    out.print(f"every worker's log under 1 MB (worst {r['worst_worker_bytes']:,} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
