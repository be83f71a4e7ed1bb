"""Which sources and job queues no live worker serves: work there waits for ever, silently, unless
someone says so. Pure: the caller reads the worker registry (`duecast status`, the dispatcher).
"""

from __future__ import annotations

from collections.abc import Iterable

from ..settings import JOBS_SOURCE, TOPICS_SOURCE
from ..storage.worker_registry import LiveWorker


def serving(sources: Iterable[str], live: Iterable[LiveWorker]) -> dict[str, int]:
    """Source name -> how many live workers serve it (0: nobody)."""
    workers = list(live)
    return {s: sum(1 for w in workers if w.serves(s)) for s in sources}


def unserved(sources: Iterable[str], live: Iterable[LiveWorker]) -> list[str]:
    return [s for s, n in serving(sources, live).items() if n == 0]


def label(source: str) -> str:
    """How an operator names it: `queue default (jobs.default)`, `source user_block_status`."""
    if source.startswith(f"{JOBS_SOURCE}."):
        return f"queue {source.removeprefix(f'{JOBS_SOURCE}.')} ({source})"
    if source.startswith(f"{TOPICS_SOURCE}."):
        return f"consumer group {source}"
    return f"source {source}"


def unserved_line(source: str) -> str:
    return f"{label(source)}: no live worker serves it; its work waits until one does"
