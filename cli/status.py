"""`duecast status [--watch] [--json]`: reads the system and shows it (cli/status_view.py's tables,
or one JSON document). Keeps answering while a server is down: what it can read, plus one line on
what it cannot (a one-shot then exits 3, docs/runbook.md#exit-codes).
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any, TypeVar

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.text import Text

from ..shared.fanout.protocol import QueueError
from ..shared.fanout.queue import ReadyQueue
from ..shared.monitor.coverage import unserved, unserved_line
from ..shared.monitor.freshness import failed_share
from ..shared.process import arguments
from ..shared.process.failures import EXIT_OK, EXIT_UNAVAILABLE, explain
from ..shared.process.runtime import build_queue
from ..shared.settings import Settings, load_settings
from ..shared.storage.admin.dashboard_store import DashboardStore, WorkerRow
from ..shared.storage.db import Database
from ..shared.storage.key_status import KeyLimitState, read_key_limits
from ..shared.storage.limits import LimitState, read_limits
from ..shared.storage.topic_status import TopicMonitor
from ..shared.storage.worker_registry import LiveWorker, WorkerRegistry, bad_rows_line
from . import formats
from .history import History, Reading
from .sampler import Sampler
from .status_limits import key_limits_json, key_limits_table, limits_json, limits_table, over_lines
from .status_view import fit, redis_table, render
from .topics import topic_tables

T = TypeVar("T")


@dataclass
class Frame:
    """One look at the system: each part is None when it could not be read now."""

    reading: Reading | None = None
    stale_since: float | None = None  # the reading is an earlier one: the servers stopped answering
    workers: list[WorkerRow] | None = None
    live: list[LiveWorker] | None = None
    redis_lengths: dict[str, int] = field(default_factory=dict)  # when MySQL cannot be read
    redis_counters: dict[str, dict[str, int]] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)  # one line per server that did not answer
    unserved: list[str] | None = None  # sources and queues no live worker serves (None: unknown)
    bad_workers: list[str] = field(default_factory=list)  # registry rows skipped as malformed
    limits: list[LimitState] | None = None  # limited sources and queues (cli/status_limits.py)
    key_limits: list[KeyLimitState] | None = None  # key-limited queues' busiest keys (the same)


class StatusReader:
    """Reads each part on its own, so a server that refuses costs its parts only."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.sampler: Sampler | None = None
        self.queue: ReadyQueue = build_queue(settings)
        self.dashboard = DashboardStore(Database(settings.mysql), settings.jobs)
        self.registry = WorkerRegistry(Database(settings.mysql), settings.worker)
        self.limits_db = Database(settings.mysql)
        self.history = History(maxlen=2)  # rates compare the last two readings

    def frame(self) -> Frame:
        out = Frame()
        out.reading = self._attempt(out, lambda: self._read(out))
        if out.reading is None:
            out.reading = self.history.latest()
            out.stale_since = out.reading.at if out.reading is not None else None
            if out.reading is None:
                self._attempt(out, lambda: self._redis_only(out))
        out.workers = self._attempt(out, self.dashboard.workers)
        out.live = self._attempt(out, self.registry.alive)
        out.limits = self._attempt(out, self._limits)
        out.key_limits = self._attempt(out, lambda: read_key_limits(self.limits_db, self.settings.jobs))
        out.bad_workers = list(self.registry.bad_rows) if out.live is not None else []
        if out.live is not None:
            out.unserved = unserved([s.name for s in self.settings.all_sources()], out.live)
        return out

    def _read(self, out: Frame) -> Reading:
        if self.sampler is None:
            self.sampler = Sampler.connect(self.settings)  # verifies the schema: not migrated fails here
        try:
            reading = self.sampler.read()
        except QueueError as exc:
            # Redis away: MySQL's side still holds every backlog. Not kept in the history: rates
            # from counters read as empty would spike once Redis answers again.
            self._unavailable(out, exc)
            return self.sampler.read(redis=False)
        self.history.add(reading)
        return reading

    def _limits(self) -> list[LimitState]:
        limited = [s for s in self.settings.all_sources() if s.limited]
        jobs = self.settings.jobs
        if not limited and not (jobs.enabled and jobs.task_limits):
            return []  # no read: the table may not be migrated where no limit is set
        return read_limits(self.limits_db, self.settings.dispatcher.limits_table, limited, jobs)

    def _redis_only(self, out: Frame) -> bool:
        names = [s.name for s in self.settings.all_sources()]
        out.redis_lengths = {n: self.queue.length(n) for n in names}
        out.redis_counters = {n: self.queue.stats(n) for n in names}
        return True

    @staticmethod
    def _attempt(out: Frame, read: Callable[[], T]) -> T | None:
        """read(), or None with one line in out.problems when a server is unavailable; anything
        else (a schema to migrate, a bug) is raised."""
        try:
            return read()
        except Exception as exc:
            StatusReader._unavailable(out, exc)
            return None

    @staticmethod
    def _unavailable(out: Frame, exc: Exception) -> None:
        """One line in out.problems for a server that is unavailable; anything else is raised."""
        problem = explain(exc)
        if problem is None or problem.code != EXIT_UNAVAILABLE:
            raise exc
        if str(problem) not in out.problems:
            out.problems.append(str(problem))


def view(
    frame: Frame, history: History, console: Console, topics: TopicMonitor | None, *, problems: bool = True
) -> RenderableType:
    """The frame's tables, each fitted to the console; `problems`: end with a line per unread server."""
    parts = render(frame.reading, history, frame.workers, frame.live)
    if frame.reading is None and frame.redis_lengths:
        parts.insert(0, redis_table(list(frame.redis_lengths), frame.redis_lengths, frame.redis_counters))
    if topics is not None and not frame.problems:
        parts.extend(topic_tables(topics))  # groups, then volume
    if frame.stale_since is not None:
        shown = time.strftime("%H:%M:%S", time.localtime(frame.stale_since))
        parts.insert(0, Text(f"sources and queues as read at {shown}", style="yellow"))
    limits = limits_table(frame.limits or [])
    if limits is not None:
        parts.append(limits)
        parts.extend(over_lines(frame.limits or []))
    keys = key_limits_table(frame.key_limits or [])
    if keys is not None:
        parts.append(keys)
    parts.extend(Text(unserved_line(s), style="red") for s in frame.unserved or ())
    if frame.bad_workers:
        parts.append(Text(formats.plain(bad_rows_line(frame.bad_workers)), style="yellow"))
    if problems:
        parts.extend(Text(f"cannot read: {formats.plain(p)}", style="red") for p in frame.problems)
    return Group(*(piece for part in parts for piece in fit(part, console)))


def as_json(frame: Frame, history: History) -> dict[str, Any]:
    """The frame for scripts: numbers as numbers, seconds as seconds, None where unknown."""
    sources = []
    for snap in frame.reading.sources if frame.reading is not None else ():
        fresh = snap.freshness
        sources.append(
            {
                "name": snap.name,
                "due": snap.db.due,
                "in_flight": snap.db.in_flight,
                "unit": snap.db.unit,
                "oldest_due_age_s": snap.db.oldest_due_age_s,
                "states": snap.db.detail,
                "in_redis": snap.list_length if snap.redis_read else None,
                "counters": snap.counters if snap.redis_read else None,
                "fresh_share": None if fresh is None else fresh.fresh_share,
                "fresh_share_exact": None if fresh is None else fresh.exact,
                # Failed checks count as checks in fresh_share: this says how many failed.
                "failed_share": None if fresh is None else failed_share(snap.counters),
                "worst_staleness_s": None if fresh is None else fresh.worst_staleness_s,
                "rates_per_s": history.current_rates(snap.name) or None,
            }
        )
    if frame.reading is None:
        sources = [
            {"name": n, "in_redis": length, "counters": frame.redis_counters.get(n, {})}
            for n, length in frame.redis_lengths.items()
        ]
    return {
        "read_at": None if frame.reading is None else frame.reading.at,
        "stale": frame.stale_since is not None,
        "sources": sources,
        "workers_running_jobs": None if frame.workers is None else [asdict(w) for w in frame.workers],
        "workers_alive": None if frame.live is None else [_live(w) for w in frame.live],
        "unserved": frame.unserved,
        "limits": limits_json(frame.limits),
        "key_limits": key_limits_json(frame.key_limits),
        "workers_malformed": frame.bad_workers,
        "unavailable": frame.problems,
    }


def _live(w: LiveWorker) -> dict[str, Any]:
    doc = asdict(w)
    doc["sources"] = w.sources.split(",") if w.sources else []
    doc["tasks"] = None if w.tasks is None else sorted(w.tasks)
    doc["started_at"] = w.started_at.isoformat()
    return doc


def main(rest: list[str]) -> int:
    parser = arguments.parser(prog="duecast status", description="Show the state of every source.")
    parser.add_argument("--watch", action="store_true", help="refresh until Ctrl-C")
    parser.add_argument("--interval", type=float, default=2.0, help="seconds between refreshes (--watch)")
    parser.add_argument("--count", type=int, default=0, help="stop after this many refreshes (0 = never)")
    parser.add_argument("--json", action="store_true", help="one JSON document on stdout, for scripts")
    args = parser.parse_args(rest)
    if args.interval <= 0:
        parser.error("--interval must be > 0")
    if args.json and args.watch:
        parser.error("--json takes one reading; run it again for another")
    settings = load_settings(args.config)
    reader = StatusReader(settings)
    console = Console()
    topics = TopicMonitor(Database(settings.mysql), settings.topics) if settings.topics.names else None
    if not args.watch:
        frame = reader.frame()
        if args.json:
            print(json.dumps(as_json(frame, reader.history), default=str))
        else:
            console.print(view(frame, reader.history, console, topics, problems=False))
        if frame.problems:  # one line on stderr, as every command's failure
            print(f"duecast status: {formats.plain('; '.join(frame.problems))}", file=sys.stderr)
        return EXIT_UNAVAILABLE if frame.problems else EXIT_OK
    return _watch(reader, console, topics, args.interval, args.count)


def _watch(
    reader: StatusReader, console: Console, topics: TopicMonitor | None, interval_s: float, count: int
) -> int:
    def screen() -> RenderableType:
        return view(reader.frame(), reader.history, console, topics)

    stop = threading.Event()
    shown = 0
    with Live(screen(), console=console, auto_refresh=False) as live:
        try:
            while not stop.wait(interval_s):
                live.update(screen(), refresh=True)
                shown += 1
                if count and shown >= count:
                    break
        except KeyboardInterrupt:
            pass
    return EXIT_OK
