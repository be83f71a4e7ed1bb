"""`duecast demo`: the user_block_status re-scan, end to end, with a live display and a summary.

Builds the table, migrates it, starts one dispatcher and N workers as real processes, samples
MySQL and Redis once a second, and stops every process it started.
"""

from __future__ import annotations

import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from rich.console import Console
from rich.live import Live
from rich.progress import Progress

from ...shared.fanout.queue import ReadyQueue
from ...shared.monitor.status import snapshot
from ...shared.process import arguments
from ...shared.process.loop import stop_on_signals
from ...shared.process.runtime import build_queue, build_stores
from ...shared.settings import Settings, SourceSettings, load_settings
from ...shared.storage.admin import demo_table as demo_data
from ...shared.storage.admin import migrate
from ...shared.storage.source_store import Store
from .fleet import Fleet
from .results import Run, Sample
from .view import live_table, summary

APP = "duecast.examples.block_check"
__all__ = ["Run", "Sample", "main", "run"]


def demo_settings(base: Settings, period_s: float, batch: int = 2000, mode: str = "ranges") -> Settings:
    src: SourceSettings = demo_data.source(period_s, batch, mode)
    return base.model_copy(update={"sources": [src]})


def write_config(settings: Settings, path: Path, workers_concurrency: int) -> None:
    """The children's settings file: the demo source and worker knobs (connection stays in env)."""
    src = settings.sources[0]
    path.write_text(
        "[[sources]]\n"
        f'name = "{src.name}"\ntable = "{src.table}"\nid_column = "{src.id_column}"\n'
        f'due_column = "{src.due_column}"\nperiod_s = {src.period_s}\n'
        f"claim_batch = {src.claim_batch}\nhigh_water = {src.high_water}\n"
        f'mode = "{src.mode}"\nrange_size = {src.range_size}\n'
        + "".join(  # fleet-wide limits, when a benchmark sets them (bench/limits.py)
            f"{k} = {v}\n"
            for k in ("rate_limit_per_s", "rate_burst", "max_running")
            if (v := getattr(src, k))
        )
        + "\n"
        f'[worker]\nconcurrency = {workers_concurrency}\nsources = ["{src.name}"]\n'
        f"pop_batch = {src.claim_batch}\n"
    )


def run(
    settings: Settings,
    users: int,
    workers: int,
    seconds: float,
    *,
    concurrency: int = 1,
    console: Console | None = None,
    stop: threading.Event | None = None,
    before_stop: Callable[[], None] | None = None,
    all_due: bool = False,
    app: str = APP,
    extra_env: dict[str, str] | None = None,
) -> Run:
    """Prepare, start, watch for `seconds`, stop. `before_stop` runs while every process still
    works (benchmarks take their end-of-run measurements there). `all_due`: every user due at the
    start, the worst case for an even pace (else their last checks are spread over a period).
    `app` and `extra_env`: the workers' handler module and environment (a benchmark's own)."""
    console = console or Console()
    stop = stop or threading.Event()
    with Progress(console=console, transient=True) as bar:
        task = bar.add_task(f"preparing {users:,} users", total=users)
        built = demo_data.prepare(
            settings.mysql, users, settings.sources[0].period_s, lambda n: bar.advance(task, n)
        )
    console.print(f"table {demo_data.TABLE}: {users:,} users ({'built' if built else 'reused'})")
    migrate.apply(settings, on_step=lambda s: console.print(f"migrate: {s.splitlines()[0]}"))
    stores = build_stores(settings, settings.sources)
    queue = build_queue(settings)
    for key in (queue.keys.ready, queue.keys.bell, queue.keys.stats, queue.keys.quarantine):
        queue.client.delete(key(demo_data.TABLE))  # our own demo keys only
    stores[0].reset_dispatched()
    if all_due:  # ranges not discovered yet start due anyway (never checked)
        demo_data.make_all_due(settings.mysql, settings.sources[0])
    result = Run(users, workers, settings.sources[0].period_s, settings.sources[0].mode)
    # Logs are kept (and named in the summary): a demo that went wrong must say why.
    logs = Path(tempfile.mkdtemp(prefix="duecast-demo-"))
    write_config(settings, logs / "demo.toml", concurrency)
    fleet = Fleet(logs / "demo.toml", app, logs, extra_env=extra_env or {})
    fleet.start_dispatcher()
    for i in range(workers):
        fleet.start_worker(f"worker-{i + 1}")
    try:
        _watch(
            fleet=fleet,
            stores=stores,
            queue=queue,
            result=result,
            seconds=seconds,
            console=console,
            stop=stop,
        )
        if before_stop is not None:
            before_stop()
    finally:
        result.cpu_s = fleet.cpu_seconds()
        result.exit_codes = fleet.stop()
    result.log_dir = logs
    result.errors = {name: tail for name in fleet.procs if (tail := _error_tail(logs / f"{name}.log"))}
    return result


def _error_tail(log: Path, lines: int = 12) -> str:
    """The end of a process log if it recorded an error, else ''."""
    text = log.read_text(errors="replace") if log.exists() else ""
    if " ERROR " not in text and "Traceback" not in text:
        return ""
    return "\n".join(text.splitlines()[-lines:])


def _watch(
    *,
    fleet: Fleet,
    stores: list[Store],
    queue: ReadyQueue,
    result: Run,
    seconds: float,
    console: Console,
    stop: threading.Event,
) -> None:
    start = time.monotonic()
    with Live(console=console, refresh_per_second=2, transient=False) as live:
        while not stop.is_set() and time.monotonic() - start < seconds:
            snap = snapshot(stores, queue)[0]
            result.samples.append(Sample(time.monotonic(), snap.counters.get("acked", 0), snap))
            live.update(live_table(result, len(fleet.alive()), len(fleet.procs), time.monotonic() - start))
            stop.wait(1.0)


def main(argv: list[str] | None = None) -> int:
    parser = arguments.parser(prog="duecast demo", description=__doc__)
    parser.add_argument("--users", type=int, default=100_000, help="rows in user_block_status")
    parser.add_argument("--workers", type=int, default=3, help="worker processes")
    parser.add_argument("--seconds", type=float, default=30.0, help="run time (Ctrl-C ends early)")
    parser.add_argument("--period", type=float, default=10.0, help="re-check period in seconds")
    parser.add_argument("--concurrency", type=int, default=1, help="handler threads per worker")
    parser.add_argument("--batch", type=int, default=2000, help="rows per claim and per pop")
    parser.add_argument(
        "--mode",
        choices=["ranges", "rows"],
        default="ranges",
        help="dispatch state per range of ids (the fastest) or per row",
    )
    parser.add_argument(
        "--start",
        choices=["spread", "due"],
        default="spread",
        help="users' last checks spread over a period, or every user due at once (the even pace "
        "settles within two periods)",
    )
    args = parser.parse_args(argv)
    if args.users < 1 or args.workers < 1 or args.seconds <= 0:
        parser.error("--users and --workers must be >= 1 and --seconds > 0")
    settings = demo_settings(load_settings(args.config), args.period, args.batch, args.mode)
    stop = threading.Event()
    stop_on_signals(stop)
    console = Console()
    result = run(
        settings,
        args.users,
        args.workers,
        args.seconds,
        concurrency=args.concurrency,
        console=console,
        stop=stop,
        all_due=args.start == "due",
    )
    console.print()  # the live display leaves the cursor on its last line
    console.print(summary(result))
    for name, tail in result.errors.items():
        console.print(f"[red]{name} logged errors[/red]; last lines:\n{tail}", highlight=False)
    console.print(f"process logs: {result.log_dir}")
    return 1 if result.errors or any(result.exit_codes.values()) else 0
