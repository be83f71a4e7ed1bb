"""The tables of `duecast status`: sources with backlog, lag and freshness, job queues by state,
workers running jobs, and rates from the Redis counters' deltas; `fit` splits a table by columns so
that no cell is ever cut at the terminal's width (80 columns, or a pipe). Rendering only: reading
is cli/status.py's.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from rich.console import Console, RenderableType
from rich.measure import Measurement
from rich.table import Column, Table
from rich.text import Text

from ..shared.monitor.status import SourceSnapshot
from ..shared.process.runtime import is_job_queue
from ..shared.storage.admin.dashboard_store import WorkerRow
from ..shared.storage.worker_registry import LiveWorker
from . import formats
from .history import History, Reading

QUEUE_STATES = ("pending", "due", "scheduled", "dispatched", "running", "done", "dead", "cancelled")
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
        "failed",
        "timed out",
        "stale",
        "bad",
        "requeued",
        "fresh",
        "failing",
        "worst staleness",
        "checks/s",
    )
    for col in columns:
        table.add_column(col, justify="left" if col == "source" else "right")
    for s in snaps:
        c = s.counters
        rates = history.current_rates(s.name)
        table.add_row(
            formats.shown(s.name),
            formats.count(s.db.due),
            f"{s.db.in_flight:,}",
            f"{s.list_length:,}" if s.redis_read else "?",
            formats.seconds(s.db.oldest_due_age_s),
            f"{c.get('acked', 0):,}",
            f"{c.get('failed', 0):,}",
            f"{c.get('timed_out', 0):,}",
            f"{c.get('stale_entries', 0) + c.get('stale_acks', 0):,}",
            f"{c.get('bad', 0):,}",
            f"{c.get('requeued', 0):,}",
            formats.share(s.freshness),
            formats.failing(s.freshness, rates, c),
            formats.staleness(s.freshness),
            formats.rate(rates.get("acked")),
        )
    table.caption = (
        "fresh: rows checked within period + 1 s, failed checks included"
        + (" (≈: over InnoDB's row estimate)" if formats.estimated(s.freshness for s in snaps) else "")
        + "; failing: checks that failed, "
        + ("since the last reading" if len(history) >= 2 else "since the counters began")
    )
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
            formats.shown(s.name.split(".", 1)[1]),
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
            formats.shown(w.worker),
            f"{w.running:,}",
            formats.shown(", ".join(w.queues)),
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
        table.add_row(
            formats.shown(w.name),
            formats.shown(w.sources),
            f"{formats.duration(w.silent_s)} ago",
            str(w.started_at)[:19],
        )
    if not live:
        table.add_row("[dim]none[/dim]", "", "", "")
    return table


def redis_table(names: Iterable[str], lengths: dict[str, int], counters: dict[str, dict[str, int]]) -> Table:
    """What Redis alone tells while MySQL cannot be read: each source's list and counters."""
    table = Table(title="sources and queues (Redis only)")
    for col in ("source", "in Redis", "acked", "failed", "stale", "bad", "requeued"):
        table.add_column(col, justify="left" if col == "source" else "right")
    for name in names:
        c = counters.get(name, {})
        stale = c.get("stale_entries", 0) + c.get("stale_acks", 0)
        cells = (lengths.get(name, 0), c.get("acked", 0), c.get("failed", 0), stale, c.get("bad", 0))
        table.add_row(formats.shown(name), *(f"{n:,}" for n in cells), f"{c.get('requeued', 0):,}")
    return table


def render(
    reading: Reading | None,
    history: History,
    workers: list[WorkerRow] | None,
    live: list[LiveWorker] | None = None,
) -> list[RenderableType]:
    """The tables for one reading; None parts (unreadable now) are left out."""
    snaps = list(reading.sources) if reading is not None else []
    parts: list[RenderableType] = []
    sources = [s for s in snaps if not is_job_queue(s.name)]
    queues = [s for s in snaps if is_job_queue(s.name)]
    if sources:
        parts.append(source_table(sources, history))
    if queues:
        parts.append(queue_table(queues, history))
    if queues and workers is not None:
        parts.append(worker_table(workers))
    if live is not None:
        parts.append(live_worker_table(live))
    if reading is not None and len(history) < 2:
        parts.append(Text(NO_RATES, style="dim"))
    return parts


class Keyed(Table):
    """A table whose first `keys` columns together say what a row is (a consumer group is its topic
    and its name): `fit` repeats them all in each part, so no row of a part is ambiguous."""

    def __init__(self, *args: Any, keys: int = 1, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.keys = keys


def fit(part: RenderableType, console: Console) -> list[RenderableType]:
    """`part`, or for a table wider than the console, tables of its columns that each fit, the first
    column (what a row is; a Keyed table's first columns) repeated in each: rich would otherwise cut
    cells and headers to `…`."""
    if not isinstance(part, Table) or _width(part, console) <= console.width:
        return [part]
    n = part.keys if isinstance(part, Keyed) else 1
    key, rest = part.columns[:n], part.columns[n:]
    groups: list[list[Column]] = [list(key)]
    for col in rest:
        if len(groups[-1]) > n and _width(_table(part, [*groups[-1], col]), console) > console.width:
            groups.append(list(key))
        groups[-1].append(col)
    return [_table(part, cols, (i, len(groups))) for i, cols in enumerate(groups, start=1)]


def _width(table: Table, console: Console) -> int:
    # Measured against unlimited room: against the console's, rich reports the squeezed width.
    return Measurement.get(console, console.options.update_width(100_000), table).maximum


def _table(like: Table, columns: list[Column], part: tuple[int, int] | None = None) -> Table:
    title = like.title if part is None else Text.assemble(like.title or "", f" ({part[0]}/{part[1]})")
    last = part is None or part[0] == part[1]
    table = Table(
        title=title,
        caption=like.caption if last else None,
        box=like.box,
        padding=like.padding,
        show_edge=like.show_edge,
    )
    for col in columns:
        # fold: a cell too wide even alone wraps onto a second line instead of losing its end
        table.add_column(col.header, justify=col.justify, overflow="fold")
    for cells in zip(*(list(col.cells) for col in columns), strict=True):
        table.add_row(*cells)
    return table
