"""Wiring for `duecast dispatcher` / `python -m dispatcher`: settings -> roles -> loop."""

from __future__ import annotations

import argparse
import logging
import threading
from collections.abc import Callable

from dispatcher.dispatcher import Dispatcher
from dispatcher.ranges import RangeKeeper
from dispatcher.scheduler import start as scheduler_start
from dispatcher.sweeper import Sweeper
from shared.health import serving, with_port
from shared.loop import run
from shared.range_store import RangeStore
from shared.runtime import build_queue, build_stores, start_process
from shared.settings import Settings
from shared.store import Store

log = logging.getLogger("duecast.dispatcher")


def serve(settings: Settings, stop: threading.Event, *, drain: bool = False) -> None:
    """Run the dispatcher and its singleton duties until stopped (or, draining, until idle)."""
    sources = settings.all_sources()
    queue = build_queue(settings)
    dispatcher = Dispatcher(build_stores(settings, sources), queue, settings.dispatcher, settings.faults)
    # Duties run in scheduler threads, on their own connections (PyMySQL is not thread-safe).
    keeper = RangeKeeper(_range_stores(build_stores(settings, sources)), settings.dispatcher)
    keeper.discover(full=True)  # before the first claim, so a new range source is covered at once
    jobs: list[tuple[str, Callable[[], object], float]] = []
    if settings.dispatcher.run_sweeper:
        sweeper = Sweeper(build_stores(settings, sources), queue, settings.dispatcher)
        jobs.append(("duecast-sweeper", sweeper.sweep_all, settings.dispatcher.sweep_interval_s))
    if keeper.stores:
        jobs.append(("duecast-ranges", keeper.tick, settings.dispatcher.range_discover_s))
    scheduler = scheduler_start(stop, jobs) if jobs and not drain else None
    log.info("dispatching %s", ", ".join(s.name for s in sources))
    try:
        with serving(settings, "dispatcher") as liveness:
            run(dispatcher, stop, drain=drain, pause=dispatcher.pause, on_turn=liveness.beat)
    finally:
        if scheduler is not None:
            scheduler.shutdown(wait=True)
    log.info("dispatcher stopped; claimed %s", dict(dispatcher.counts))


def serve_sweeper(settings: Settings, stop: threading.Event, *, once: bool = False) -> None:
    """Run only the sweeper (when dispatchers run with dispatcher.run_sweeper=false)."""
    sources = settings.all_sources()
    sweeper = Sweeper(build_stores(settings, sources), build_queue(settings), settings.dispatcher)
    if once:
        sweeper.sweep_all()
        return
    scheduler = scheduler_start(
        stop, [("duecast-sweeper", sweeper.sweep_all, settings.dispatcher.sweep_interval_s)]
    )
    stop.wait()
    scheduler.shutdown(wait=True)


def _range_stores(stores: list[Store]) -> list[RangeStore]:
    return [s for s in stores if isinstance(s, RangeStore)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="duecast dispatcher", description=__doc__)
    parser.add_argument("--config", help="TOML settings file (else DUECAST_CONFIG)")
    parser.add_argument("--drain", action="store_true", help="exit once nothing is due")
    parser.add_argument(
        "--health-port",
        type=int,
        help="serve /healthz, /readyz and /metrics on this port (overrides health.port; 0 = off)",
    )
    args = parser.parse_args(argv)
    settings, stop = start_process(args.config)
    settings = with_port(settings, args.health_port)
    serve(settings, stop, drain=args.drain)
    return 0


def sweeper_main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="duecast sweeper", description="Run only the sweeper job.")
    parser.add_argument("--config", help="TOML settings file (else DUECAST_CONFIG)")
    parser.add_argument("--once", action="store_true", help="sweep once and exit")
    args = parser.parse_args(argv)
    settings, stop = start_process(args.config)
    serve_sweeper(settings, stop, once=args.once)
    return 0
