"""Wiring for `duecast worker` / `python -m duecast.worker`: settings + the user's app -> worker loop."""

from __future__ import annotations

import argparse
import functools
import logging
import os
import sys
import threading
from collections.abc import Mapping
from dataclasses import replace

from ..shared.api.app import load_registry
from ..shared.api.handlers import Handler, Registry
from ..shared.policy import idle_transaction_limit_s
from ..shared.process import arguments
from ..shared.process.failures import StartupError, retry_startup
from ..shared.process.health import serving, with_port
from ..shared.process.loop import run, stop_on_signals
from ..shared.process.runtime import (
    QueueFactory,
    build_queue,
    build_stores,
    check_redis,
    is_job_queue,
    start_process,
)
from ..shared.settings import JOBS_SOURCE, TOPICS_SOURCE, Settings
from ..shared.storage.db import Database, close_all
from ..shared.storage.job_cancels import JobCancels
from ..shared.storage.leased.jobs import JobStore
from ..shared.storage.leased.keeper import last_words
from ..shared.storage.member_store import member_name
from ..shared.storage.pause_store import PauseStore
from ..shared.storage.pool import Pool
from ..shared.storage.source_store import Store
from ..shared.storage.worker_registry import Heartbeat
from ..shared.telemetry.observe import timed
from .broadcast import broadcast_members, running, served_topic_sources, slot_member
from .cancels import CancelWatch
from .lifespan import run_start, run_stop
from .supervisor import MAX_PROCESSES, supervise
from .worker import Worker

log = logging.getLogger("duecast.worker")
MAX_PORT = 65535
FINISH_GRACE_S = 30.0  # on SIGTERM: how long in-flight checks may take to finish and be acked


def _timed(handler: Handler, source: str) -> Handler:
    """The handler with each plain call timed into handler_duration_seconds{source} (the event loop
    times async calls itself)."""
    return handler if handler.fn is None else replace(handler, fn=timed(handler.fn, source))


def serve(
    settings: Settings, stop: threading.Event, *, drain: bool = False, make_queue: QueueFactory = build_queue
) -> Worker:
    """Run a worker until stopped (or, draining, until the lists are empty); returns it for its counts.

    `make_queue` builds the Redis side from the settings (tests/faults wraps it to stop at an instant).
    """
    if not settings.worker.app:
        raise StartupError("no app given; pass --app package.module or set worker.app (DUECAST_WORKER__APP)")
    registry = load_registry(settings.worker.app)
    sources = [settings.source(name) for name in served_sources(settings, registry.sources)]
    handlers = {s.name: registry.handler(JOBS_SOURCE if is_job_queue(s.name) else s.name) for s in sources}
    handlers = {name: _timed(h, name) for name, h in handlers.items()}  # per source/queue
    idle_s = idle_transaction_limit_s(settings.worker.idle_transaction_s, [s.lease_s for s in sources])
    built = build_stores(settings, sources, stop, idle_transaction_s=idle_s)
    stores = {store.src.name: store for store in built}
    check_columns(registry, stores)
    queue = make_queue(settings)
    check_redis(queue, wait=bool(settings.health.port))
    tasks = registry.task_names if any(is_job_queue(name) for name in stores) else frozenset()
    heartbeat = Heartbeat(settings.mysql, settings.worker, list(stores), tasks)
    retry_startup(heartbeat.registry.verify, what="the workers table check", stop=stop)
    worker = Worker(stores, handlers, queue, settings.worker, process=heartbeat.name)
    sessions: list[Database | Pool] = [see_pauses(settings, worker, built).db]
    if tasks:  # a job cancelled while it runs here: told at the lease renewal's cadence
        cancels = JobCancels(Database(settings.mysql), settings.jobs.table)
        worker.cancels = CancelWatch(cancels, settings.jobs.lease_s / 3)
        sessions.append(cancels.db)
    members = broadcast_members(settings, registry, settings.worker.sources or registry.sources, stop)
    log.info(
        "working on %s with %d thread(s)%s, up to %d rows in flight",
        ", ".join(stores),
        settings.worker.concurrency,
        " and an event loop" if any(h.afn is not None for h in handlers.values()) else "",
        worker.cap,
    )
    heartbeat.start()
    started = False
    try:
        run_start(registry.hooks, worker.loop)  # before the first handler
        started = True
        fenced = last_words(worker.starter.hand_back_held)  # if a lease keeper ends the process
        with serving(settings, "worker") as liveness, running(members, stop, drain=drain), fenced:
            if stores or not members:
                beat, probe, backoff_s = liveness.beat, queue.ping, settings.worker.error_backoff_s
                run(worker, stop, drain=drain, error_base_s=backoff_s, on_turn=beat, probe=probe)
                worker.finish(FINISH_GRACE_S)
            else:  # broadcast members only: they run in their own threads
                while not drain and not stop.wait(1.0):
                    liveness.beat()
    finally:
        if started:
            run_stop(registry.hooks, worker.loop)  # after the last handler (or the grace period)
        worker.close()
        heartbeat.stop()
        close_all([*stores.values(), *sessions])
    log.info("worker stopped; %s", dict(worker.counts))
    return worker


def see_pauses(settings: Settings, worker: Worker, stores: list[Store]) -> PauseStore:
    """What an operator paused is not popped, so not started (its own connection: this thread's);
    a start gives back the jobs of a paused task (shared.storage.leased.run_units). Returns the
    store, for serve to close."""
    pauses = PauseStore(Database(settings.mysql))
    worker.starter.paused = pauses.paused_or_last
    for store in stores:
        if isinstance(store, JobStore):
            store.paused_tasks = pauses.paused_tasks
    return pauses


def check_columns(registry: Registry, stores: Mapping[str, Store]) -> None:
    """Start-up check: every column a row/batch handler names (`columns=`) is in its table, which the
    store read from information_schema; a typo would otherwise fail every batch until redelivery."""
    for name, store in stores.items():
        if is_job_queue(name) or name.startswith(f"{TOPICS_SOURCE}."):
            continue  # duecast's own tables and handlers
        table_columns: frozenset[str] = getattr(store, "columns", frozenset())
        missing = [c for c in registry.handler(name).columns if c not in table_columns]
        if missing and table_columns:
            table = getattr(store, "business", store.src).table  # range mode: the rows' table
            raise StartupError(
                f"the handler for source {name!r} reads column(s) {', '.join(missing)}, which table "
                f"{table} does not have; fix columns=[...] in @registry.row/batch({name!r}, ...)"
            )


def served_sources(settings: Settings, registered: list[str]) -> list[str]:
    """Source names in pop order: "jobs" becomes its queues (worker.queues order, first = first).

    With worker.sources unset, every configured source the app has handlers for: one app may carry
    handlers for sources a deployment does not configure, and those are named in one warning at
    start. A source worker.sources names that is not configured or has no handler, or an app with
    nothing configured to serve, ends the start with one line naming it.
    """
    unknown = [q for q in settings.worker.queues if q not in settings.jobs.queues]
    if unknown:
        raise StartupError(
            f"worker.queues names {', '.join(unknown)}, "
            f"not in jobs.queues ({', '.join(settings.jobs.queues)})"
        )
    named = settings.worker.sources
    out: list[str] = []
    unserved: dict[str, str] = {}  # handler source -> why it is not served
    for name in named or registered:
        if name not in registered:
            raise StartupError(
                f"--source / worker.sources names {name!r}, but the app registers no handler for it "
                f"(it has: {', '.join(registered) or 'none'})"
            )
        try:
            out.extend(_pop_names(settings, name))
        except StartupError as exc:
            if named:
                raise
            unserved[name] = str(exc)
    if unserved and len(unserved) == len(registered):
        raise StartupError("; ".join(unserved.values()))
    if unserved:
        log.warning(
            "serving the configured sources only: %s",
            "; ".join(unserved.values()),
            extra={"event": "worker.unconfigured_sources", "sources": list(unserved)},
        )
    return out


def _pop_names(settings: Settings, name: str) -> list[str]:
    """What a worker pops for the app's handler source `name`; StartupError when it is not configured."""
    if name == JOBS_SOURCE:
        if not settings.jobs.enabled:
            raise StartupError("the app registers tasks, but jobs.enabled is false; set it to true")
        return [f"{JOBS_SOURCE}.{q}" for q in settings.worker.queues or settings.jobs.queues]
    if name.startswith(f"{TOPICS_SOURCE}."):
        return served_topic_sources(settings, name)
    configured = {s.name for s in settings.sources}
    if name not in configured:
        raise StartupError(
            f"the app registers a handler for source {name!r}, which is not configured "
            f"(sources: {', '.join(sorted(configured)) or 'none'}); fix the name in "
            "@registry.row/batch(...) or add a [[sources]] entry named so"
        )
    return [name]


def main(argv: list[str] | None = None, *, make_queue: QueueFactory = build_queue) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = _parser().parse_args(argv)
    settings, stop = start_process(args.config)
    settings = _with_flags(settings, args)
    if args.supervise or args.processes > 1:
        last_port = _slot_port(settings, args.health_port, args.processes - 1)
        if last_port > MAX_PORT:
            raise StartupError(
                f"--processes {args.processes} serves health ports up to {last_port}, past {MAX_PORT}; "
                "set a lower health.port (or --health-port)"
            )
        slot = functools.partial(_run_slot, settings, args, make_queue)
        return supervise(settings, slot, processes=args.processes)
    return _run(with_port(settings, args.health_port), stop, drain=args.drain, make_queue=make_queue)


def _slot_port(settings: Settings, flag: int | None, slot: int) -> int:
    """The health port of a supervised child in `slot`: health.port (or --health-port) plus the slot,
    so the processes on one host serve an endpoint each; 0 stays off."""
    port = settings.health.port if flag is None else flag
    return port + slot if port else 0


def _run_slot(settings: Settings, args: argparse.Namespace, make_queue: QueueFactory, slot: int) -> int:
    """A supervised child's worker, in the process forked for `slot`: its own stop event and signal
    handlers (the parent's forward to it), its own health port and, with --processes, its own
    broadcast member name."""
    stop = threading.Event()
    stop_on_signals(stop)
    port = _slot_port(settings, args.health_port, slot)
    if args.processes > 1:  # a broadcast member per process, not one for all of them
        member = slot_member(member_name(settings.topics), slot)
        topics = settings.topics.model_validate({**settings.topics.model_dump(), "member": member})
        settings = settings.model_copy(update={"topics": topics})
    return _run(with_port(settings, port), stop, drain=args.drain, make_queue=make_queue)


def _run(settings: Settings, stop: threading.Event, *, drain: bool, make_queue: QueueFactory) -> int:
    worker = serve(settings, stop, drain=drain, make_queue=make_queue)
    if worker is not None and worker.threads.stuck:
        # Python joins every handler thread at exit, and a stuck call may never return: leave now.
        log.warning(
            "exiting with %d handler thread(s) still stuck in calls given up at their timeout_s",
            worker.threads.stuck,
            extra={"event": "worker.exit_stuck"},
        )
        logging.shutdown()
        os._exit(0)
    return 0


def _processes(text: str) -> int:
    """--processes: an int from 1 to MAX_PROCESSES (an argparse type: a bad one is the usage line)."""
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if not 1 <= n <= MAX_PROCESSES:
        raise argparse.ArgumentTypeError(f"{n} is not between 1 and {MAX_PROCESSES}")
    return n


def _parser() -> argparse.ArgumentParser:
    parser = arguments.parser(
        prog="duecast worker",
        description="Pop entries from Redis, run the app's handlers, tasks and consumers, and ack in MySQL.",
    )
    parser.add_argument(
        "--app",
        action="append",
        default=[],
        help="module[:attribute] holding a handler Registry (repeat to serve several apps)",
    )
    parser.add_argument("--source", action="append", default=[], help="serve only these sources")
    parser.add_argument("--concurrency", type=int, help="handler threads per process")
    parser.add_argument(
        "--queue",
        action="append",
        default=[],
        help="job queues to serve, in strict order (repeat; default: jobs.queues)",
    )
    parser.add_argument("--drain", action="store_true", help="exit once the ready lists are empty")
    parser.add_argument(
        "--supervise",
        action="store_true",
        help="run the worker as a child process and restart it when it exits; what a child that died "
        "held goes back at once, not after its leases (docs/runbook.md#the-worker-supervisor)",
    )
    parser.add_argument(
        "--processes",
        type=_processes,
        default=1,
        help="run this many worker processes under one supervisor (implies --supervise): each is "
        "forked once the imports are done, so it starts without importing them again; with a health "
        "port, process i serves it at port + i (docs/runbook.md#the-worker-supervisor)",
    )
    parser.add_argument("--member", help="broadcast groups: this process's member name (topics.member)")
    parser.add_argument(
        "--health-port",
        type=int,
        help="serve /healthz, /readyz and /metrics on this port (overrides health.port; 0 = off)",
    )
    return parser


def _with_flags(settings: Settings, args: argparse.Namespace) -> Settings:
    """The settings with what the command line set (--app, --source, --concurrency, --queue, --member)."""
    overrides = {
        k: v
        for k, v in (
            ("app", ",".join(args.app)),
            ("sources", args.source or None),
            ("concurrency", args.concurrency),
            ("queues", args.queue or None),
        )
        if v
    }
    if overrides:
        settings = settings.model_copy(
            update={"worker": settings.worker.model_validate({**settings.worker.model_dump(), **overrides})}
        )
    if args.member:
        topics = settings.topics.model_validate({**settings.topics.model_dump(), "member": args.member})
        settings = settings.model_copy(update={"topics": topics})
    return settings
