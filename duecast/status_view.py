"""`duecast status [--watch]`: the whole system in the terminal (rich): sources with backlog, lag and
freshness, job queues by state, workers running jobs, and rates from the Redis counters' deltas.
"""

from __future__ import annotations

import argparse
import threading

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.table import Table
from rich.text import Text

from duecast import formats
from duecast.admin.dashboard_store import DashboardStore, WorkerRow
from duecast.history import History, Reading
from duecast.sampler import Sampler
from duecast.shared.monitor.status import SourceSnapshot
from duecast.shared.monitor.topic_status import TopicMonitor
from duecast.shared.process.runtime import is_job_queue
from duecast.shared.settings import load_settings
from duecast.shared.storage.db import Database
from duecast.shared.storage.worker_registry import LiveWorker, WorkerRegistry
from duecast.topics_cli import topic_tables

QUEUE_STATES = ("pending", "due", "scheduled", "dispatched", "running", "done", "dead")
NO_RATES = "rates need two readings: `duecast status --watch`"


def source_table(snaps: list[SourceSnapshot], history: History) -> Table:
    table = Table(title="sources")
    columns = (
        "source",
        "due",
        "in flight",
        "in Redis",
        "oldest due age",
        "acked",
        "stale",
        "bad",
        "requeued",
        "fresh",
        "worst staleness",
        "checks/s",
    )
    for col in columns:
        table.add_column(col, justify="left" if col == "source" else "right")
    for s in snaps:
        c = s.counters
        rates = history.current_rates(s.name)
        table.add_row(
            s.name,
            formats.count(s.db.due),
            f"{s.db.in_flight:,}",
            f"{s.list_length:,}",
            formats.seconds(s.db.oldest_due_age_s),
            f"{c.get('acked', 0):,}",
            f"{c.get('stale_entries', 0) + c.get('stale_acks', 0):,}",
            f"{c.get('bad', 0):,}",
            f"{c.get('requeued', 0):,}",
            formats.share(s.freshness),
            formats.staleness(s.freshness),
            formats.rate(rates.get("acked")),
        )
    table.caption = "fresh: rows checked within period + 1 s (≈: over InnoDB's row estimate)"
    return table


def queue_table(snaps: list[SourceSnapshot], history: History) -> Table:
    """Job queues by state: the numbers an operator of a job system looks at first."""
    table = Table(title="job queues")
    for col in ("queue", *QUEUE_STATES, "oldest due age", "finished/s", "failed/s"):
        table.add_column(col, justify="left" if col == "queue" else "right")
    for s in snaps:
        detail = s.db.detail or {}
        rates = history.current_rates(s.name)
        table.add_row(
            s.name.split(".", 1)[1],
            *(formats.count(detail.get(c, 0)) for c in QUEUE_STATES),
            formats.seconds(s.db.oldest_due_age_s),
            formats.rate(rates.get("acked")),
            formats.rate(rates.get("failed")),
        )
    return table


def worker_table(workers: list[WorkerRow]) -> Table:
    table = Table(title="workers running jobs")
    for col in ("worker (host:pid)", "running", "queues", "last start", "leases"):
        table.add_column(col, justify="right" if col in ("running", "last start") else "left")
    for w in workers:
        table.add_row(
            w.worker,
            f"{w.running:,}",
            ", ".join(w.queues),
            f"{formats.duration(w.last_start_age_s)} ago",
            "live" if w.leases_live else "[red]expired[/red]",
        )
    if not workers:
        table.add_row("[dim]none now[/dim]", "", "", "", "")
    return table


def live_worker_table(live: list[LiveWorker]) -> Table:
    """Every worker process in the registry that beat within worker.dead_after_s."""
    table = Table(title="workers alive")
    for col in ("worker (host:pid)", "sources", "last heartbeat", "up since"):
        table.add_column(col, justify="right" if col == "last heartbeat" else "left")
    for w in live:
        table.add_row(w.name, w.sources, f"{formats.duration(w.silent_s)} ago", str(w.started_at)[:19])
    if not live:
        table.add_row("[dim]none[/dim]", "", "", "")
    return table


def render(
    reading: Reading, history: History, workers: list[WorkerRow], live: list[LiveWorker] | None = None
) -> RenderableType:
    snaps = list(reading.sources)
    parts: list[RenderableType] = []
    sources = [s for s in snaps if not is_job_queue(s.name)]
    queues = [s for s in snaps if is_job_queue(s.name)]
    if sources:
        parts.append(source_table(sources, history))
    if queues:
        parts.append(queue_table(queues, history))
        parts.append(worker_table(workers))
    if live is not None:
        parts.append(live_worker_table(live))
    if len(history) < 2:
        parts.append(Text(NO_RATES, style="dim"))
    return Group(*parts)


def main(rest: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="duecast status", description="Show the state of every source.")
    parser.add_argument("--config")
    parser.add_argument("--watch", action="store_true", help="refresh until Ctrl-C")
    parser.add_argument("--interval", type=float, default=2.0, help="seconds between refreshes (--watch)")
    parser.add_argument("--count", type=int, default=0, help="stop after this many refreshes (0 = never)")
    args = parser.parse_args(rest)
    if args.interval <= 0:
        parser.error("--interval must be > 0")
    settings = load_settings(args.config)
    sampler = Sampler.connect(settings)
    dashboard = DashboardStore(Database(settings.mysql), settings.jobs)
    registry = WorkerRegistry(Database(settings.mysql), settings.worker)
    history = History(maxlen=2)  # rates compare the last two readings
    console = Console()

    topics = TopicMonitor(Database(settings.mysql), settings.topics) if settings.topics.names else None

    def frame() -> RenderableType:
        history.add(sampler.read())
        latest = history.latest()
        assert latest is not None
        view = render(latest, history, dashboard.workers(), registry.alive())
        return view if topics is None else Group(view, *topic_tables(topics))  # groups, then volume

    if not args.watch:
        console.print(frame())
        return 0
    stop = threading.Event()
    shown = 0
    with Live(frame(), console=console, auto_refresh=False) as live:
        try:
            while not stop.wait(args.interval):
                live.update(frame(), refresh=True)
                shown += 1
                if args.count and shown >= args.count:
                    break
        except KeyboardInterrupt:
            pass
    return 0
