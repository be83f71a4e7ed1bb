"""Process start-up shared by every role: logging, clients and verified stores built from settings.

Nothing here runs at import time; each role's `main()` calls these once.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Literal

from ..fanout.client import connect_redis, redis_problem, translated
from ..fanout.keys import Keys
from ..fanout.protocol import Queue, QueueError
from ..fanout.queue import ReadyQueue
from ..settings import JOBS_SOURCE, Settings, SourceSettings, load_settings
from ..storage.db import Database
from ..storage.leased.groups import GroupStore
from ..storage.leased.jobs import JobStore
from ..storage.range_store import RangeStore
from ..storage.source_store import SourceStore, Store
from . import collector, logs
from .failures import retry_startup
from .logs import LogFormat
from .loop import stop_on_signals

Leased = Literal["jobs", "group"]  # the LeasedStore kinds: JobStore, GroupStore


def setup_logging(level: str, fmt: LogFormat = "human") -> None:
    logs.setup(level, fmt)


def start_process(config: str | None) -> tuple[Settings, threading.Event]:
    """Common start of every role's main(): settings, logging, and a stop event tied to signals."""
    settings = load_settings(config)
    setup_logging(settings.log_level, settings.log_format)
    collector.resume()  # paused by the role's entry module while it imported (collector.py)
    stop = threading.Event()
    stop_on_signals(stop)
    return settings, stop


def build_queue(settings: Settings) -> ReadyQueue:
    """The one place the Redis-backed queue is built; the roles get it as the Queue port. A Cluster
    client connects as it is made: its refusal comes out as duecast's error too."""
    with translated():
        return ReadyQueue(connect_redis(settings.redis), Keys(settings.redis.key_prefix))


def check_redis(queue: Queue, *, wait: bool = False) -> None:
    """Start-up check that Redis answers, then warn if it may evict keys.

    Unreachable: the error ends the start with one line naming redis.url (shared/process/failures.py),
    unless `wait` (health probes on: the role stays up, not ready, and its loop retries; an
    orchestrator restarting it would not bring Redis back). Refused credentials end it even then:
    waiting cannot fix a wrong password, and every tick would fail for ever (issue 16.6)."""
    try:
        queue.ping()
    except QueueError as exc:
        found = redis_problem(exc)
        if not wait or (found is not None and not found[1]):
            raise
        logging.getLogger("duecast").warning(
            "%s; not ready until it answers", found[0] if found else exc, extra={"event": "redis.unreachable"}
        )
        return
    warn_eviction(queue)


# What a role's serve()/main() builds its ReadyQueue with: build_queue, or a test's wrapper of it.
QueueFactory = Callable[[Settings], ReadyQueue]


def warn_eviction(queue: Queue) -> None:
    """Start-up check: a Redis that may evict keys silently drops entries (recovered only by the
    sweeper, after the visibility timeout). Unreachable Redis is the loop's business, not ours."""
    try:
        policy = queue.eviction_policy()
    except QueueError:
        return
    if policy is not None and policy != "noeviction":
        logging.getLogger("duecast").warning(
            "Redis maxmemory-policy is %r: under memory pressure it may evict ready lists; "
            "duecast recovers them only after the visibility timeout. Use noeviction.",
            policy,
        )


def _store(db: Database, settings: Settings, src: SourceSettings, kinds: dict[str, Leased]) -> Store:
    kind = kinds.get(src.name)
    if kind == "jobs":
        return JobStore(db, src, settings.jobs, settings.mysql)
    cap = settings.jobs.max_delay_s  # one cap on how far ahead an Ack may put work, as enqueue's
    if kind == "group":
        return GroupStore(db, src, settings.topics, settings.mysql, cap)
    return SourceStore(db, src, cap) if src.mode == "rows" else RangeStore(db, src, cap)


def store_kinds(settings: Settings) -> dict[str, Leased]:
    """The leased sources by the settings section that declares them: each job queue of [jobs], each
    cluster group of [topics]. Any other source is a table of the [[sources]] list."""
    kinds: dict[str, Leased] = {src.name: "jobs" for src in settings.jobs.queue_sources()}
    kinds.update((src.name, "group") for src in settings.topics.group_sources())
    return kinds


def is_job_queue(source: str) -> bool:
    return source.startswith(f"{JOBS_SOURCE}.")


def build_stores(
    settings: Settings,
    sources: list[SourceSettings],
    stop: threading.Event | None = None,
    *,
    idle_transaction_s: int = 0,
) -> list[Store]:
    """One store per source on one fresh connection, each verified against information_schema.

    A role passes its `stop`: a check that meets a transient MySQL error then runs again until it
    succeeds or `stop` is set (retry_startup). Commands (status, web) pass none and get the error.
    A table that does not match the settings ends the start at once either way. A worker passes
    `idle_transaction_s` (shared.storage.db: its sessions' idle-transaction limit)."""
    db = Database(settings.mysql, idle_transaction_s=idle_transaction_s)
    kinds = store_kinds(settings)
    stores: list[Store] = [_store(db, settings, src, kinds) for src in sources]
    for store in stores:
        if stop is None:
            store.verify()
        else:
            retry_startup(store.verify, what=f"the schema check of {store.src.name}", stop=stop)
    return stores
