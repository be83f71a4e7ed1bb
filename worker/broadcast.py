"""Broadcast members: per tick, read the messages after this member's position straight from MySQL,
run the consumer, and commit the new position. No Redis, no acks, no retries: every live member
sees every message; a failure is logged and counted, and a crash re-reads from the last position.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from ..shared.api.handlers import Handler, Registry
from ..shared.process.failures import StartupError, retry_startup
from ..shared.process.loop import Tick, run
from ..shared.settings import Settings, TopicsSettings
from ..shared.storage.db import Database
from ..shared.storage.member_store import LostMember, MemberStore, member_name

log = logging.getLogger("duecast.broadcast")


class BroadcastMember:
    def __init__(self, store: MemberStore, handler: Handler, settings: TopicsSettings) -> None:
        self.name = f"broadcast {store.group.source} as {store.member}"
        self.store = store
        self.handler = handler
        self.settings = settings
        self.joined = False
        self.handled = self.failed = 0
        self._idle_ticks = 0

    def tick(self) -> Tick:
        wait = self.settings.poll_interval_s
        if not self.joined:
            self.joined = self.store.join()
            if not self.joined:
                log.warning("%s: another live process holds this member; waiting for it", self.name)
                return Tick(self.settings.member_ttl_s / 3, idle=True)
        try:
            rows = self.store.read(self.settings.read_batch)
            if not rows:
                self._beat_now_and_then()
                return Tick(wait, idle=True)
            outcomes = self.handler.run(rows)
            failed = self.store.advance(rows, outcomes)
        except LostMember as exc:
            log.warning("%s: %s; joining again", self.name, exc)
            self.joined = False
            return Tick(0.0, idle=False)
        for row, outcome in zip(rows, outcomes, strict=True):
            if isinstance(outcome, BaseException):
                log.error("%s: consumer failed for message %s: %r", self.name, row["seq"], outcome)
        self.handled += len(rows) - failed
        self.failed += failed
        return Tick(0.0 if len(rows) == self.settings.read_batch else wait, idle=False)

    def _beat_now_and_then(self) -> None:
        """Idle members heartbeat about every member_ttl_s / 3, so they stay live (and hold
        retention) without a write per poll."""
        self._idle_ticks += 1
        if self._idle_ticks * self.settings.poll_interval_s >= self.settings.member_ttl_s / 3:
            self._idle_ticks = 0
            if not self.store.beat():
                self.joined = False


def slot_member(base: str, slot: int) -> str:
    """The broadcast member name of `duecast worker --processes N`'s child in `slot`: `base-slot`.
    Each process is a member of its own (a consumer that evicts a local cache must run in every
    one), and a child started again in its slot resumes that slot's position. Cut to the 100
    characters a member name may have."""
    suffix = f"-{slot}"
    return base[: 100 - len(suffix)] + suffix


def broadcast_members(
    settings: Settings, registry: Registry, names: list[str], stop: threading.Event
) -> list[BroadcastMember]:
    """A member for each broadcast group among `names` (handler sources) the app has a consumer for;
    each one's tables are checked at start-up (retried through a transient MySQL error until `stop`)."""
    wanted = set(names)
    members = []
    for group in settings.topics.groups:
        if group.mode == "broadcast" and group.source in wanted:
            store = MemberStore(
                Database(settings.mysql), settings.topics, group, member_name(settings.topics)
            )
            retry_startup(store.verify, what=f"the schema check of {group.source}", stop=stop)
            members.append(BroadcastMember(store, registry.handler(group.source), settings.topics))
    return members


@contextmanager
def running(members: list[BroadcastMember], stop: threading.Event, *, drain: bool) -> Iterator[None]:
    """Each member's loop in its own thread (each has its own connection) for the block's duration;
    leaving waits for them: they end when `stop` is set or, draining, at their first idle tick."""
    threads = [
        threading.Thread(target=run, args=(m, stop), kwargs={"drain": drain}, name=m.name, daemon=True)
        for m in members
    ]
    for thread in threads:
        thread.start()
    try:
        yield
    finally:
        if not drain:
            stop.set()  # the worker is leaving: so are its members
        for thread in threads:
            thread.join()
        for member in members:
            if member.joined:
                try:
                    member.store.leave()
                except Exception:
                    log.warning("%s: could not hand the member back", member.name, exc_info=True)
        if members:
            log.info("broadcast: %s", {m.name: (m.handled, m.failed) for m in members})


def served_topic_sources(settings: Settings, name: str) -> list[str]:
    """What a worker pops for handler source `name` of a topic group: its ready list for a cluster
    group, nothing for a broadcast group (its members read MySQL). An undeclared group stops here."""
    for group in settings.topics.groups:
        if group.source == name:
            return [name] if group.mode == "cluster" else []
    declared = ", ".join(g.source for g in settings.topics.groups) or "none"
    raise StartupError(
        f"the app consumes {name}, which topics.groups does not declare ({declared}); "
        "declare the group in topics.groups or fix the name in @registry.consumer(...)"
    )
