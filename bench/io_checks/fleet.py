"""One run of the demo re-scan (user_block_status) with a given handler module, sampled every second.

Builds the table, starts one dispatcher and N workers (`--app` and settings as the benchmark asks),
records the source's counters and every process's CPU seconds once a second, and stops them all.
It measures nothing itself: io_rescan.py and http_check.py read the samples. Only the benchmark
namespace is touched (bench/harness.py checks it before a run).
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console
from rich.progress import Progress

from duecast.cli.demo.fleet import Fleet, cpu_seconds
from duecast.shared.process.runtime import build_queue, build_stores
from duecast.shared.settings import Settings
from duecast.shared.storage.admin import demo_table as demo_data
from duecast.shared.storage.admin import migrate

SOURCE = demo_data.TABLE
BENCH_DIR = Path(__file__).resolve().parent  # the handler modules' folder: on the workers' PYTHONPATH
# ...followed by the caller's, so that an A/B against an archived tree (PYTHONPATH=/tmp/base) runs
# that tree's workers too, not only its benchmark process.
CHILD_PATH = os.pathsep.join(p for p in (str(BENCH_DIR), os.environ.get("PYTHONPATH")) if p)


@dataclass(frozen=True)
class Setup:
    """What one run starts: the table, the processes, and what the settings file adds."""

    users: int
    period_s: float
    workers: int
    seconds: float
    app: str  # the workers' --app, e.g. "io_rescan_app:async_fast"
    source_toml: dict[str, float | int | str] = field(default_factory=dict)  # extra keys of [[sources]]
    worker_toml: dict[str, float | int | str] = field(default_factory=dict)  # extra keys of [worker]
    env: dict[str, str] = field(default_factory=dict)  # for every child, besides PYTHONPATH
    batch: int = 2000


@dataclass(frozen=True)
class Tick:
    t: float  # time.monotonic()
    counters: dict[str, int]  # the source's counters in Redis (acked, failed, ...)
    cpu_s: dict[str, float]  # CPU seconds so far per process: dispatcher, worker-N, and `watch`ed pids

    @property
    def acked(self) -> int:
        return self.counters.get("acked", 0)


@dataclass
class Outcome:
    ticks: list[Tick]
    early_exits: list[str]  # processes that ended before they were told to (with their last line)
    errors: list[str]  # the first error lines logged while the clock ran
    error_lines: int  # how many there were
    exit_codes: dict[str, int]
    log_dir: Path

    def failure(self, errors_expected: bool = False) -> str | None:
        """Why the run does not count, or None. A handler that times out on purpose logs errors."""
        if self.early_exits:
            return f"{self.early_exits} (logs: {self.log_dir})"
        if self.errors and not errors_expected:
            return f"{self.error_lines} error lines logged, first: {self.errors} (logs: {self.log_dir})"
        return None

    def shutdown_note(self) -> str | None:
        """Processes that did not exit cleanly once told to stop: after the figures were taken, so
        reported, not a failure (a worker whose threads are stuck in long calls needs SIGKILL)."""
        bad = {name: code for name, code in self.exit_codes.items() if code}
        return f"exit codes after SIGTERM: {bad} (logs: {self.log_dir})" if bad else None

    def window(self, skip_s: float) -> tuple[Tick, Tick]:
        """The first tick at least `skip_s` after the start, and the last tick."""
        start = self.ticks[0].t + skip_s
        first = next((t for t in self.ticks if t.t >= start), self.ticks[-1])
        return first, self.ticks[-1]

    def rate(self, skip_s: float, counter: str = "acked") -> float:
        a, b = self.window(skip_s)
        return (b.counters.get(counter, 0) - a.counters.get(counter, 0)) / (b.t - a.t) if b.t > a.t else 0.0

    def cpu(self, skip_s: float, prefix: str) -> float:
        """CPU seconds used in the window by the processes whose name starts with `prefix`."""
        a, b = self.window(skip_s)
        return sum(v - a.cpu_s.get(k, v) for k, v in b.cpu_s.items() if k.startswith(prefix))

    def cores(self, skip_s: float, prefix: str) -> float:
        a, b = self.window(skip_s)
        return self.cpu(skip_s, prefix) / (b.t - a.t) if b.t > a.t else 0.0


def settings_toml(settings: Settings, setup: Setup) -> str:
    """The children's settings file: the demo source and the worker, plus the setup's extra keys."""
    src = settings.sources[0]
    source = {
        "name": src.name, "table": src.table, "id_column": src.id_column, "due_column": src.due_column,
        "period_s": src.period_s, "claim_batch": src.claim_batch, "high_water": src.high_water,
        "mode": src.mode, "range_size": src.range_size, **setup.source_toml,
    }  # fmt: skip
    worker = {"sources": [src.name], "pop_batch": src.claim_batch, **setup.worker_toml}
    return f"[[sources]]\n{_toml(source)}\n[worker]\n{_toml(worker)}"


def _toml(table: dict[str, object]) -> str:
    def value(v: object) -> str:
        if isinstance(v, str):
            return f'"{v}"'
        if isinstance(v, list):
            return "[" + ", ".join(value(x) for x in v) + "]"
        return str(v)

    return "".join(f"{k} = {value(v)}\n" for k, v in table.items())


def prepare(settings: Settings, setup: Setup, console: Console) -> None:
    """The table of `users` (kept when it already fits), the schema, and an empty start: no entries
    in Redis, no counters, nothing dispatched."""
    with Progress(console=console, transient=True) as bar:
        task = bar.add_task(f"preparing {setup.users:,} users", total=setup.users)
        demo_data.prepare(settings.mysql, setup.users, setup.period_s, lambda n: bar.advance(task, n))
    migrate.apply(settings)
    queue = build_queue(settings)
    for key in (queue.keys.ready, queue.keys.bell, queue.keys.stats, queue.keys.quarantine):
        queue.client.delete(key(SOURCE))
    build_stores(settings, settings.sources)[0].reset_dispatched()


def run(
    settings: Settings,
    setup: Setup,
    console: Console,
    watch: dict[str, int] | None = None,
    before_stop: Callable[[], None] | None = None,
) -> Outcome:
    """Prepare, start, sample every second for `setup.seconds`, call `before_stop` while every
    process still works, stop. `watch`: other processes (name -> pid) whose CPU is sampled too."""
    prepare(settings, setup, console)
    logs = Path(tempfile.mkdtemp(prefix="duecast-bench-io-"))
    config = logs / "settings.toml"
    config.write_text(settings_toml(settings, setup))
    fleet = Fleet(config, setup.app, logs, extra_env={"PYTHONPATH": CHILD_PATH, **setup.env})
    queue = build_queue(settings)
    ticks: list[Tick] = []
    offsets: dict[str, int] = {}
    dead: list[str] = []
    fleet.start_dispatcher()
    for i in range(setup.workers):
        fleet.start_worker(f"worker-{i + 1}")
    try:
        deadline = time.monotonic() + setup.seconds
        while time.monotonic() < deadline and len(fleet.alive()) == len(fleet.procs):
            cpu = fleet.cpu_seconds() | {name: cpu_seconds(pid) for name, pid in (watch or {}).items()}
            ticks.append(Tick(time.monotonic(), queue.stats(SOURCE), cpu))
            time.sleep(max(0.0, 1.0 - (time.monotonic() - ticks[-1].t)))
        dead = [name for name in fleet.procs if name not in fleet.alive()]
        if before_stop is not None and not dead:
            before_stop()
    finally:
        offsets = {name: _size(logs / f"{name}.log") for name in fleet.procs}
        codes = fleet.stop()
    early = [f"{name} exited early: {_last_line(logs / f'{name}.log')}" for name in dead]
    errors = [line for name, cut in offsets.items() for line in _errors(logs / f"{name}.log", name, cut)]
    return Outcome(ticks, early, errors[:5], len(errors), codes, logs)


def _last_line(log: Path) -> str:
    lines = log.read_text(errors="replace").strip().splitlines() if log.exists() else []
    return lines[-1][:300] if lines else "(nothing logged)"


def _size(path: Path) -> int:
    return path.stat().st_size if path.exists() else 0


def _errors(log: Path, name: str, cut: int) -> list[str]:
    """Error lines a process logged before it was told to stop (after, they cannot move a number)."""
    text = log.read_bytes()[:cut].decode(errors="replace") if log.exists() else ""
    bad = [line for line in text.splitlines() if " ERROR " in line or "Traceback" in line]
    return [f"{name}: {line.strip()[:200]}" for line in bad]
