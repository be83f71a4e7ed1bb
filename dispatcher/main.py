"""Wiring for `duecast dispatcher` / `python -m dispatcher`: settings -> roles -> loop."""

from __future__ import annotations

import argparse
import logging
import threading

from dispatcher.dispatcher import Dispatcher
from dispatcher.sweeper import Sweeper, schedule
from shared.loop import run
from shared.runtime import build_queue, build_stores, start_process
from shared.settings import Settings

log = logging.getLogger("duecast.dispatcher")


def serve(settings: Settings, stop: threading.Event, *, drain: bool = False) -> None:
    """Run the dispatcher (and the sweeper job, unless disabled) until stopped or drained."""
    sources = settings.all_sources()
    queue = build_queue(settings)
    dispatcher = Dispatcher(build_stores(settings, sources), queue, settings.dispatcher, settings.faults)
    scheduler = None
    if settings.dispatcher.run_sweeper and not drain:
        # Its own connection: PyMySQL connections are not shared across threads.
        sweeper = Sweeper(build_stores(settings, sources), queue, settings.dispatcher)
        scheduler = schedule(sweeper, stop)
    log.info("dispatching %s", ", ".join(s.name for s in sources))
    try:
        run(dispatcher, stop, drain=drain)
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
    scheduler = schedule(sweeper, stop)
    stop.wait()
    scheduler.shutdown(wait=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="duecast dispatcher", description=__doc__)
    parser.add_argument("--config", help="TOML settings file (else DUECAST_CONFIG)")
    parser.add_argument("--drain", action="store_true", help="exit once nothing is due")
    args = parser.parse_args(argv)
    settings, stop = start_process(args.config)
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
