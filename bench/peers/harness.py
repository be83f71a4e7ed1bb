"""What every peer driver shares: its command line, its worker processes, the drain clock, its result line.

Standard library only: drivers import it from duecast's .venv and from .bench-venv alike. It never
talks to a server itself; each driver says how to count the jobs still to do.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
POLL_INTERVAL_S = 0.05  # the drain clock's resolution: every driver polls its backlog this often
# The workloads: "noop" jobs do nothing; "io" jobs wait IO_WAIT_S, standing in for a call to another
# service (asyncio.sleep for asyncio workers, a monkey-patched time.sleep for gevent pools).
WORKLOADS = ("noop", "io")
IO_WAIT_S = 0.02


@dataclass(frozen=True)
class Options:
    jobs: int
    workers: int
    log_dir: Path
    timeout_s: float  # a drain that takes longer is stopped and reported as timed out
    variant: str
    workload: str  # one of WORKLOADS


def parse_args(doc: str | None, argv: list[str] | None = None, variants: tuple[str, ...] = ("",)) -> Options:
    parser = argparse.ArgumentParser(description=doc)
    parser.add_argument("--jobs", type=int, required=True)
    parser.add_argument("--workers", type=int, required=True)
    parser.add_argument("--log-dir", type=Path, required=True)
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds a drain may take")
    parser.add_argument("--variant", choices=variants, default=variants[0])
    parser.add_argument("--workload", choices=WORKLOADS, default=WORKLOADS[0])
    a = parser.parse_args(argv)
    a.log_dir.mkdir(parents=True, exist_ok=True)
    # SIGTERM from the runner unwinds like Ctrl-C, so `finally: workers.stop()` runs: no strays.
    signal.signal(signal.SIGTERM, _interrupt)
    return Options(a.jobs, a.workers, a.log_dir, a.timeout, a.variant, a.workload)


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def child_env(**extra: str) -> dict[str, str]:
    """The environment for worker processes: ours, plus this folder on the import path."""
    path = os.environ.get("PYTHONPATH", "")
    return {**os.environ, "PYTHONPATH": f"{HERE}{os.pathsep}{path}" if path else str(HERE), **extra}


@dataclass
class Workers:
    """Worker processes of one drain, each in its own session so that stopping one stops its children."""

    log_dir: Path
    env: dict[str, str] = field(default_factory=child_env)
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    stop_offsets: dict[str, int] = field(default_factory=dict)  # log sizes when stop() began

    def log(self, name: str) -> Path:
        return self.log_dir / f"{name}.log"

    def start(self, name: str, argv: list[str]) -> None:
        with self.log(name).open("ab") as log:
            self.procs[name] = subprocess.Popen(
                argv, cwd=HERE, env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )

    def exited(self) -> dict[str, int]:
        return {n: rc for n, p in self.procs.items() if (rc := p.poll()) is not None}

    def stop(self, timeout_s: float = 10.0) -> dict[str, int]:
        """SIGTERM each process group, wait, then SIGKILL what is left of it; returns exit codes."""
        self.stop_offsets = {name: self.log(name).stat().st_size for name in self.procs}
        for proc in self.procs.values():
            _signal_group(proc, signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        codes = {}
        for name, proc in self.procs.items():
            try:
                codes[name] = proc.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                codes[name] = -9
            _signal_group(proc, signal.SIGKILL)  # forked children that outlived their parent
            proc.wait()
        return codes

    def errors(self, limit: int = 5) -> tuple[list[str], list[str]]:
        """Error lines of the worker logs: (while working, after stop() signalled them).

        Only the first fail a run. A library that trips over its own SIGTERM handling (RQ can
        leave a pipeline half read) did so after the clock stopped, which moves no number.
        """
        working: list[str] = []
        shutdown: list[str] = []
        for name in self.procs:
            text = self.log(name).read_bytes()
            cut = self.stop_offsets.get(name, len(text))
            working += _error_lines(name, text[:cut])
            shutdown += _error_lines(name, text[cut:])
        return working[:limit], shutdown[:limit]


def _error_lines(name: str, text: bytes) -> list[str]:
    lines = text.decode(errors="replace").splitlines()
    bad = ("Traceback", " ERROR", "[ERROR]", "ERROR:", "CRITICAL")
    return [f"{name}: {line.strip()[:200]}" for line in lines if any(b in line for b in bad)]


def _signal_group(proc: subprocess.Popen[bytes], sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, sig)  # start_new_session: the group id is the leader's pid


@dataclass(frozen=True)
class Drain:
    seconds: float  # from just before the first worker started to the poll that saw 0 jobs left
    first_progress_s: float | None  # when the backlog was first seen below the number enqueued
    remaining: int
    timed_out: bool
    mariadb_cpu_s: float | None = None  # the MariaDB server's CPU over the drain (None: not found)


def mariadb_cpu_s() -> float | None:
    """CPU seconds (user + system) the local MariaDB server has used so far, or None."""
    out = subprocess.run(["pidof", "mariadbd", "mysqld"], capture_output=True, text=True, check=False)
    pids = out.stdout.split()
    if not pids:
        return None
    try:
        fields = Path(f"/proc/{pids[0]}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def time_drain(
    remaining: Callable[[], int], total: int, started: float, timeout_s: float, workers: Workers
) -> Drain:
    """Poll `remaining()` every POLL_INTERVAL_S until it is 0, the timeout passes or every worker
    exits. Also measures the MariaDB server's CPU meanwhile (the MySQL-backed systems' cost per job)."""
    first: float | None = None
    cpu_before = mariadb_cpu_s()

    def cpu() -> float | None:
        after = mariadb_cpu_s()
        return None if cpu_before is None or after is None else after - cpu_before

    while True:
        left = remaining()
        now = time.monotonic()
        if first is None and left < total:
            first = now - started
        if left <= 0:
            return Drain(now - started, first, 0, False, cpu())
        if now - started > timeout_s or len(workers.exited()) == len(workers.procs):
            return Drain(now - started, first, left, True, cpu())
        time.sleep(POLL_INTERVAL_S)


def mysql_backlog(conn: Any, table: str) -> Callable[[], int]:
    """Jobs left in a MySQL jobs table, as MAX(id) - MIN(id) + 1 (0 when empty), for the drain clock.

    Both ends are single primary-key lookups. COUNT(*) scans an index: ~15 ms at 100,000 rows, and
    every 50 ms it would take a quarter of a core from the MariaDB under test (Redis peers' LLEN
    costs nothing). Exact when empty and at the start (one enqueue's ids are consecutive), an upper
    bound in between; `exact_backlog` gives the true count when a drain is cut short.
    """

    def remaining() -> int:
        with conn.cursor() as cur:
            cur.execute(f"SELECT MIN(id), MAX(id) FROM {table}")
            lo, hi = cur.fetchone()
        return 0 if lo is None else int(hi) - int(lo) + 1

    return remaining


def exact_backlog(drain: Drain, conn: Any, table: str) -> Drain:
    """The drain with its `remaining` replaced by COUNT(*) (only a cut-short drain has any)."""
    if not drain.remaining:
        return drain
    with conn.cursor() as cur:
        cur.execute(f"SELECT COUNT(*) FROM {table}")
        (count,) = cur.fetchone()
    return replace(drain, remaining=int(count))


def emit(
    enqueue_s: float,
    drain: Drain,
    settings: dict[str, object],
    errors: list[str],
    shutdown_errors: list[str] | None = None,
) -> None:
    """The driver's result: one JSON line, the last line of its stdout."""
    out = {
        "enqueue_s": enqueue_s,
        "drain_s": drain.seconds,
        "first_progress_s": drain.first_progress_s,
        "remaining": drain.remaining,
        "timed_out": drain.timed_out,
        "mariadb_cpu_s": drain.mariadb_cpu_s,
        "settings": settings,
        "errors": errors,
        "shutdown_errors": shutdown_errors or [],
    }
    print(json.dumps(out), flush=True)


def elapsed(since: float) -> float:
    return time.monotonic() - since
