"""Pause and resume a re-scan source, a job queue, a topic's cluster consumer group or a job task,
by name.

Paused: dispatchers claim nothing more for it and workers start nothing more of it (each reads
duecast_pauses at most every 0.5 s); what is in flight finishes. Resumed: it goes on from where it
was. The state is a row in MySQL, so it holds through any restart and any Redis flush. A task is not
a dispatch source: its queue's claims leave its jobs out, and a start gives back those a run
dispatched before the pause took (shared.storage.leased.jobs, run_units).
"""

from __future__ import annotations

from ..errors import DuecastError
from ..settings import JOBS_SOURCE, Settings
from ..storage.db import Database
from ..storage.pause_store import TASK, Pause, PauseStore
from ..storage.worker_registry import WorkerRegistry
from .app import load_registry

__all__ = ["KINDS", "Pause", "PauseError", "pause", "paused", "resume", "target"]

KINDS = ("source", "queue", "group", TASK)  # what `duecast pause KIND ...` takes


class PauseError(DuecastError, ValueError):
    """A pause or resume names nothing configured; the message says what is."""


def target(settings: Settings, kind: str, names: tuple[str, ...]) -> tuple[str, str]:
    """(the name as recorded, the dispatch source it stops) for `kind` and its names: a source's
    name, a queue's name, or a group's topic and name. Raises PauseError for anything unknown."""
    want = 2 if kind == "group" else 1
    if kind not in KINDS or len(names) != want:
        given = " ".join([kind, *names])
        raise PauseError(f"say source NAME, queue NAME or group TOPIC GROUP, or task NAME (not {given!r})")
    if kind == TASK:
        return names[0], ""  # which tasks exist is the workers' to say (known_tasks)
    if kind == "source":
        known = [s.name for s in settings.sources]
        if names[0] in known:
            return names[0], names[0]
        raise PauseError(f"no source named {names[0]!r} (configured: {', '.join(known) or 'none'})")
    if kind == "queue":
        queues = list(settings.jobs.queues) if settings.jobs.enabled else []
        if names[0] in queues:
            return names[0], f"{JOBS_SOURCE}.{names[0]}"
        raise PauseError(f"no job queue named {names[0]!r} (configured: {', '.join(queues) or 'none'})")
    groups = [g for g in settings.topics.groups if (g.topic, g.name) == names]
    if groups and groups[0].mode == "cluster":
        return " ".join(names), groups[0].source
    clusters = ", ".join(f"{g.topic} {g.name}" for g in settings.topics.groups if g.mode == "cluster")
    what = "a broadcast group (its members read on their own)" if groups else "no such cluster group"
    raise PauseError(f"{what}: {' '.join(names)!r} (cluster groups: {clusters or 'none'})")


def known_tasks(settings: Settings) -> frozenset[str]:
    """The job tasks there are: worker.app's when set (as `duecast enqueue` checks), else those the
    live workers registered in the workers table."""
    if settings.worker.app:
        return load_registry(settings.worker.app).task_names
    db = Database(settings.mysql)
    try:
        return frozenset().union(*WorkerRegistry(db, settings.worker).served_tasks().values())
    finally:
        db.close()


def _unknown_task(settings: Settings, name: str) -> PauseError | None:
    known = known_tasks(settings)
    if name in known:
        return None
    listed = ", ".join(sorted(known)[:20]) + (", ..." if len(known) > 20 else "")
    where = "worker.app" if settings.worker.app else "the live workers"
    return PauseError(f"no task named {name!r} ({where} serve: {listed or 'none'})")


def pause(settings: Settings, kind: str, *names: str) -> bool:
    """Pause it; False when it already was. Nothing new starts within about a second."""
    name, source = target(settings, kind, names)
    if kind == TASK and (unknown := _unknown_task(settings, name)) is not None:
        raise unknown
    store = PauseStore(Database(settings.mysql))
    try:
        return store.pause(kind, name, source)
    finally:
        store.close()


def resume(settings: Settings, kind: str, *names: str) -> bool:
    """Resume it; False when it was not paused. A paused task is resumed even once no worker
    serves it any more; a name neither paused nor served is refused."""
    name, _ = target(settings, kind, names)
    store = PauseStore(Database(settings.mysql))
    try:
        changed = store.resume(kind, name)
    finally:
        store.close()
    if not changed and kind == TASK and (unknown := _unknown_task(settings, name)) is not None:
        raise unknown
    return changed


def paused(settings: Settings) -> list[Pause]:
    """What is paused now, with when."""
    store = PauseStore(Database(settings.mysql))
    try:
        return store.list()
    finally:
        store.close()
