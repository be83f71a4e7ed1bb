"""Wiring for `duecast dispatcher` / `python -m duecast.dispatcher`: settings -> roles -> loop."""

from __future__ import annotations

import argparse
import logging
import threading
from collections.abc import Callable

from duecast.dispatcher.coverage import Coverage
from duecast.dispatcher.dispatcher import Dispatcher
from duecast.dispatcher.gauges import SystemGauges
from duecast.dispatcher.leader import Leadership, LeaseStore
from duecast.dispatcher.pruner import Pruner
from duecast.dispatcher.ranges import RangeKeeper
from duecast.dispatcher.reaper import Reaper
from duecast.dispatcher.recurring import TICK_S, Recurring
from duecast.dispatcher.schedule_store import ScheduleStore
from duecast.dispatcher.scheduler import start as scheduler_start
from duecast.dispatcher.sweeper import Sweeper
from duecast.dispatcher.topics import topic_duties
from duecast.shared.api.enqueue import Enqueuer
from duecast.shared.api.handlers import load_registry
from duecast.shared.fanout.queue import ReadyQueue
from duecast.shared.process.health import serving, with_port
from duecast.shared.process.loop import run
from duecast.shared.process.runtime import build_queue, build_stores, check_redis, start_process
from duecast.shared.settings import Settings
from duecast.shared.storage.db import Database
from duecast.shared.storage.job_store import JobStore
from duecast.shared.storage.range_store import RangeStore
from duecast.shared.storage.source_store import Store
from duecast.shared.storage.worker_registry import WorkerRegistry

log = logging.getLogger("duecast.dispatcher")


def serve(settings: Settings, stop: threading.Event, *, drain: bool = False) -> None:
    """Run the dispatcher and its singleton duties until stopped (or, draining, until idle)."""
    sources = settings.all_sources()
    queue = build_queue(settings)
    check_redis(queue, wait=bool(settings.health.port))
    dispatcher = Dispatcher(build_stores(settings, sources), queue, settings.dispatcher, settings.faults)
    # Duties run in scheduler threads, on their own connections (PyMySQL is not thread-safe).
    keeper = RangeKeeper(_range_stores(build_stores(settings, sources)), settings.dispatcher)
    keeper.discover(full=True)  # before the first claim, so a new range source is covered at once
    jobs: list[tuple[str, Callable[[], object], float]] = []
    if settings.dispatcher.run_sweeper:
        sweeper = Sweeper(build_stores(settings, sources), queue, settings.dispatcher)
        jobs.append(("duecast-sweeper", sweeper.sweep_all, settings.dispatcher.sweep_interval_s))
        reaper_stores = {s.src.name: s for s in build_stores(settings, sources)}
        reaper = Reaper(WorkerRegistry(Database(settings.mysql), settings.worker), reaper_stores, queue)
        jobs.append(("duecast-reaper", reaper.reap, settings.worker.heartbeat_s))
    if keeper.stores:
        jobs.append(("duecast-ranges", keeper.tick, settings.dispatcher.range_discover_s))
    jobs.extend(_job_duties(settings, queue))
    jobs.extend(topic_duties(settings))
    # The system-wide gauges, for /metrics only: the leader sets them, a standby drops them.
    gauges = SystemGauges(build_stores(settings, sources), queue) if settings.health.port else None
    scheduler = None
    leadership = Leadership(
        LeaseStore(Database(settings.mysql), settings.dispatcher.leases_table),
        settings.dispatcher.leader_lease_s,
    )
    if (jobs or gauges) and not drain:
        leadership.tick()  # the first dispatcher up leads at once; the others stand by
        duties = [(name, _as_leader(leadership, fn), every) for name, fn, every in jobs]
        renew = ("duecast-leader", leadership.renew, settings.dispatcher.leader_lease_s / 3)
        if gauges is not None:
            duties.append(("duecast-gauges", gauges.duty(leadership.held), settings.health.gauges_interval_s))
        coverage = Coverage(
            WorkerRegistry(Database(settings.mysql), settings.worker),
            [s.name for s in sources],
            settings.worker.dead_after_s,
        )
        duties.append(("duecast-coverage", coverage.duty(leadership.held), settings.worker.heartbeat_s))
        scheduler = scheduler_start(stop, [renew, *duties])
    log.info("dispatching %s", ", ".join(s.name for s in sources))
    try:
        with serving(settings, "dispatcher") as liveness:
            run(dispatcher, stop, drain=drain, pause=dispatcher.pause, on_turn=liveness.beat)
    finally:
        if scheduler is not None:
            scheduler.shutdown(wait=True)
        leadership.resign()  # a standby takes over now, not when the lease runs out
    log.info("dispatcher stopped; claimed %s", dict(dispatcher.counts))


def _as_leader(leadership: Leadership, fn: Callable[[], object]) -> Callable[[], object]:
    """A singleton duty runs only while this dispatcher holds the leader lease."""

    def duty() -> object:
        return fn() if leadership.held() else None

    return duty


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


def _job_duties(settings: Settings, queue: ReadyQueue) -> list[tuple[str, Callable[[], object], float]]:
    """Recurring schedules and the pruner, when the jobs table is on; each on its own connection."""
    if not settings.jobs.enabled:
        return []
    registry = load_registry(settings.dispatcher.app) if settings.dispatcher.app else None
    schedules = settings.jobs.schedules + (registry.schedules if registry else [])
    tasks = registry.task_names if registry else None
    enqueuer = Enqueuer(settings, queue.client, tasks)
    recurring = Recurring(ScheduleStore(Database(settings.mysql), settings.jobs, enqueuer), schedules)
    first = settings.jobs.queue_sources()[0]
    pruner_store = JobStore(Database(settings.mysql), first, settings.jobs, settings.mysql)
    pruner = Pruner(pruner_store, settings.jobs.prune_batch, settings.jobs.prune_interval_s)
    duties: list[tuple[str, Callable[[], object], float]] = [
        ("duecast-pruner", pruner.prune_all, settings.jobs.prune_interval_s)
    ]
    if recurring.schedules:
        log.info("recurring schedules: %s", ", ".join(s.name for s, _ in recurring.schedules))
        duties.append(("duecast-recurring", recurring.tick, TICK_S))
    return duties


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
    parser.add_argument("--app", help="module[:attribute] whose Registry declares recurring schedules")
    args = parser.parse_args(argv)
    settings, stop = start_process(args.config)
    settings = with_port(settings, args.health_port)
    if args.app:
        dispatcher = settings.dispatcher.model_copy(update={"app": args.app})
        settings = settings.model_copy(update={"dispatcher": dispatcher})
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
