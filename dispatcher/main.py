"""Wiring for `duecast dispatcher` / `python -m duecast.dispatcher`: settings -> roles -> loop."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from ..shared.api.app import load_registry
from ..shared.api.enqueue import Enqueuer
from ..shared.fanout.queue import ReadyQueue
from ..shared.policy import Cause
from ..shared.process import arguments
from ..shared.process.failures import StartupError, retry_startup
from ..shared.process.health import serving, with_port
from ..shared.process.loop import Role, run
from ..shared.process.runtime import (
    QueueFactory,
    build_queue,
    build_stores,
    check_redis,
    start_process,
    store_kinds,
)
from ..shared.settings import Settings, SourceSettings
from ..shared.storage.db import Database, close_all
from ..shared.storage.leased.jobs import JobStore
from ..shared.storage.leases import LeaseStore
from ..shared.storage.pause_store import PauseStore
from ..shared.storage.range_store import RangeStore
from ..shared.storage.schedule_store import ScheduleStore
from ..shared.storage.worker_registry import WorkerRegistry
from .coverage import Coverage
from .dispatcher import Dispatcher
from .gauges import SystemGauges
from .leader import Leadership
from .pruner import Pruner
from .ranges import RangeKeeper
from .recurring import TICK_S, Recurring
from .redelivery import LEADER, Redelivery, cadence, sweeper
from .scheduler import Every, Guarded, Led, Running
from .topics import topic_duties

log = logging.getLogger("duecast.dispatcher")


def serve(
    settings: Settings, stop: threading.Event, *, drain: bool = False, make_queue: QueueFactory = build_queue
) -> None:
    """Run the dispatcher and its singleton duties until stopped (or, draining, until idle).

    `make_queue` builds the Redis side from the settings (tests/faults wraps it to stop at an instant).
    """
    sources = settings.all_sources()
    queue = make_queue(settings)
    check_redis(queue, wait=bool(settings.health.port))
    leases = LeaseStore(Database(settings.mysql), settings.dispatcher.leases_table)
    leadership = Leadership(leases, settings.dispatcher.leader_lease_s)
    # Duties run in their own threads, on their own connections (PyMySQL is not thread-safe).
    redelivery = _redelivery(settings, queue, leadership, stop, drain=drain)
    stores = build_stores(settings, sources, stop)
    pauses = PauseStore(Database(settings.mysql))
    for store in stores:
        if isinstance(store, JobStore):  # a paused task's jobs are left out of its queue's claims
            store.paused_tasks = pauses.paused_tasks
    dispatcher = Dispatcher(
        stores,
        queue,
        settings.dispatcher,
        redelivery,
        settings.mysql.lock_wait_s,
        paused=pauses.paused_or_last,
    )
    keeper = RangeKeeper(_range_stores(settings, sources, stop), settings.dispatcher)
    # Before the first claim, so a new range source is covered at once; a lock held on the ranges
    # table past mysql.lock_wait_s is waited out, not the end of the dispatcher (issue 12.5).
    retry_startup(lambda: keeper.discover(full=True), what="range discovery", stop=stop)
    singletons: list[tuple[Role, float]] = []  # duties only the leader runs, with their intervals
    if keeper.stores:
        singletons.append((keeper, settings.dispatcher.range_discover_s))
    singletons.extend(_job_duties(settings, queue))
    singletons.extend(topic_duties(settings, stop))
    # The system-wide gauges, for /metrics only: the leader sets them, a standby drops them.
    gauges = SystemGauges(build_stores(settings, sources, stop), queue) if settings.health.port else None
    duties = Running()
    try:
        if not drain and (singletons or gauges or settings.dispatcher.run_sweeper):
            leadership.tick()  # the first dispatcher up leads at once; the others stand by
            _start_duties(duties, settings, leadership, singletons, gauges=gauges, stop=stop)
        log.info("dispatching %s", ", ".join(s.name for s in sources))
        with serving(settings, "dispatcher") as liveness:
            # Before the first claim, in this thread: rows whose entries a fresh or flushed Redis
            # lost go back first (retried until Redis answers), so no claim is taken for lost.
            run(redelivery.canary(), stop, drain=True, on_turn=liveness.beat, probe=queue.ping)
            if not drain:
                duties.start(redelivery, probe=queue.ping)
            run(
                dispatcher, stop, drain=drain, pause=dispatcher.pause, on_turn=liveness.beat, probe=queue.ping
            )
    finally:
        duties.stop()  # each finishes its tick
        leadership.resign()  # a standby takes over now, not when the lease runs out
        close_all([*stores, *keeper.stores, *(gauges.stores if gauges else []), pauses.db, leases.db])
    log.info("dispatcher stopped; claimed %s; requeued %s", dict(dispatcher.counts), dict(redelivery.counts))


def _redelivery(
    settings: Settings, queue: ReadyQueue, leadership: Leadership, stop: threading.Event, *, drain: bool
) -> Redelivery:
    """Every dispatcher watches the canary; one hosting the sweeper also sweeps and requeues dead
    workers' holds while it leads. Draining runs no singleton duty: the canary only."""
    causes: list[Cause] = ["lost"]
    registry = None
    if settings.dispatcher.run_sweeper and not drain:
        causes.extend(LEADER)
        registry = WorkerRegistry(Database(settings.mysql), settings.worker)
    return Redelivery(
        build_stores(settings, settings.all_sources(), stop),
        queue,
        cadence(settings, causes),
        settings.dispatcher.sweep_batch,
        registry=registry,
        leads=leadership.held,
    )


def _start_duties(
    duties: Running,
    settings: Settings,
    leadership: Leadership,
    singletons: list[tuple[Role, float]],
    *,
    gauges: SystemGauges | None,
    stop: threading.Event,
) -> None:
    """The lease renewal, then each duty, its first tick one interval away (as APScheduler's interval
    jobs ran): singletons only while this dispatcher leads; the gauges and the coverage check on
    every dispatcher, exporting while it leads and dropping their samples while it stands by."""
    held = leadership.held
    duties.start(leadership, first_s=settings.dispatcher.leader_lease_s / 3)  # it ticked just now
    for duty, every_s in singletons:
        duties.start(Guarded(Led(duty, held, every_s), every_s, stop), first_s=every_s)
    watches: list[tuple[str, Callable[[], None], float]] = []
    if gauges is not None:
        watches.append(("gauges", gauges.duty(held), settings.health.gauges_interval_s))
    coverage = Coverage(
        WorkerRegistry(Database(settings.mysql), settings.worker),
        [s.name for s in settings.all_sources()],
        settings.worker.dead_after_s,
    )
    watches.append(("coverage", coverage.duty(held), settings.worker.heartbeat_s))
    for name, call, every_s in watches:
        duties.start(Guarded(Every(name, call, every_s), every_s, stop), first_s=every_s)


def serve_sweeper(settings: Settings, stop: threading.Event, *, once: bool = False) -> None:
    """Run only the sweep (when dispatchers run with dispatcher.run_sweeper=false): the rows not
    acked within their visibility timeout, and the runs whose lease ran out."""
    stores = build_stores(settings, settings.all_sources(), stop)
    redelivery = sweeper(settings, stores, build_queue(settings))
    if once:
        redelivery.drain()
        return
    run(redelivery, stop)


def _job_duties(settings: Settings, queue: ReadyQueue) -> list[tuple[Role, float]]:
    """Recurring schedules and the pruner with their intervals, when the jobs table is on; each on its
    own connection."""
    if not settings.jobs.enabled:
        return []
    registry = load_registry(settings.dispatcher.app) if settings.dispatcher.app else None
    schedules = settings.jobs.schedules + (registry.schedules if registry else [])
    tasks = registry.task_names if registry else None
    unknown = sorted(set(settings.jobs.task_limits) - tasks) if tasks is not None else []
    if unknown:  # with no app, the dispatcher cannot know the tasks (the workers register them)
        raise StartupError(
            f"jobs.task_limits names {', '.join(unknown)}, not a task of dispatcher.app "
            f"{settings.dispatcher.app} (it registers: {', '.join(sorted(tasks or ())) or 'none'})"
        )
    enqueuer = Enqueuer(settings, queue.client, tasks)
    recurring = Recurring(ScheduleStore(Database(settings.mysql), settings.jobs, enqueuer), schedules)
    first = settings.jobs.queue_sources()[0]
    pruner_store = JobStore(Database(settings.mysql), first, settings.jobs, settings.mysql)
    pruner = Pruner(pruner_store, settings.jobs.prune_batch, settings.jobs.prune_interval_s)
    duties: list[tuple[Role, float]] = [(pruner, settings.jobs.prune_interval_s)]
    if recurring.schedules:
        log.info("recurring schedules: %s", ", ".join(s.name for s, _ in recurring.schedules))
        duties.append((recurring, TICK_S))
    return duties


def _range_stores(
    settings: Settings, sources: list[SourceSettings], stop: threading.Event
) -> list[RangeStore]:
    """The range sources' stores, for the range keeper, on a session of their own. Only theirs are
    built: each other store would cost a schema check before the first claim (a cold start's)."""
    leased = store_kinds(settings)  # job queues and topic groups: never range stores
    ranged = [src for src in sources if src.name not in leased and src.mode != "rows"]
    return [s for s in build_stores(settings, ranged, stop) if isinstance(s, RangeStore)]


def main(argv: list[str] | None = None, *, make_queue: QueueFactory = build_queue) -> int:
    parser = arguments.parser(
        prog="duecast dispatcher",
        description="Claim due rows and push their entries to Redis; also redeliver unacked rows, "
        "run recurring schedules, discover ranges and feed topics' groups.",
    )
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
    serve(settings, stop, drain=args.drain, make_queue=make_queue)
    return 0


def sweeper_main(argv: list[str] | None = None) -> int:
    parser = arguments.parser(prog="duecast sweeper", description="Run only the sweeper job.")
    parser.add_argument("--once", action="store_true", help="sweep once and exit")
    args = parser.parse_args(argv)
    settings, stop = start_process(args.config)
    serve_sweeper(settings, stop, once=args.once)
    return 0
