"""Helpers shared by test_redelivery.py and test_redelivery_holds.py."""

from __future__ import annotations

from typing import cast

from duecast.dispatcher.redelivery import Redelivery
from duecast.shared.fanout.queue import ReadyQueue
from duecast.shared.policy import Cause
from duecast.shared.storage.source_store import Store
from duecast.shared.storage.worker_registry import WorkerRegistry
from tests.unit.fakes import FakeStore

BATCH = 100
SWEEP_S, POLL_S, HEARTBEAT_S = 5.0, 0.25, 1.0
EVERY: dict[Cause, float] = {"lost": POLL_S, "expired": SWEEP_S, "interrupted": SWEEP_S, "held": HEARTBEAT_S}


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class FakeRegistry:
    """Stands in for WorkerRegistry.dead/forget: `dead` lists the silent workers; `locked` ones'
    rows are held by another session (forget leaves them)."""

    def __init__(self, dead: list[str] | None = None) -> None:
        self.silent = list(dead or [])
        self.deregistered: list[str] = []
        self.locked: set[str] = set()
        self.asked = 0  # dead() calls

    def dead(self) -> list[str]:
        self.asked += 1
        return list(self.silent)

    def forget(self, name: str) -> bool:
        if name in self.locked:
            return False
        self.deregistered.append(name)
        self.silent.remove(name)
        return True


def _redelivery(
    stores: list[FakeStore],
    queue: ReadyQueue,
    every: dict[Cause, float] | None = None,
    *,
    registry: FakeRegistry | None = None,
    leads: bool = True,
    clock: Clock | None = None,
) -> Redelivery:
    return Redelivery(
        cast(list[Store], stores),
        queue,
        EVERY if every is None else every,
        BATCH,
        registry=cast(WorkerRegistry, registry or FakeRegistry()),
        leads=lambda: leads,
        clock=clock or Clock(),
    )
