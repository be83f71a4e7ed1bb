"""The dispatcher's idle wait ends on time: Redis times a blocking pop only at its hz (every 0.1 s by
default, late by up to that), so ReadyQueue.wait_wake pops for what Redis can time and sleeps the rest;
an enqueuer's wake-up still ends it at once."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import fakeredis
import pytest

from duecast.shared.fanout.keys import Keys
from duecast.shared.fanout.queue import BLOCK_RESOLUTION_S, ReadyQueue


class Recording(fakeredis.FakeRedis):
    """A Redis whose blocking pops return at once (what a real one does once its timeout is served),
    recording the timeouts asked."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.blocked: list[float] = []

    def blpop(self, keys: Any, timeout: Any = 0) -> Any:
        self.blocked.append(float(timeout))
        return self.lpop(keys[0]) and [keys[0], b"1"]


@pytest.fixture
def queue() -> Iterator[ReadyQueue]:
    client = Recording(server=fakeredis.FakeServer())
    queue = ReadyQueue(client, Keys("unit-wake"))
    slept: list[float] = []
    queue.sleep = slept.append
    queue.slept = slept  # type: ignore[attr-defined]
    yield queue
    client.close()


def test_a_wait_shorter_than_redis_can_time_is_slept_whole(queue: ReadyQueue) -> None:
    """The pace's grid waits under 0.1 s: a BLPOP of 0.05 s returned after 0.1 s, skipping a step."""
    assert queue.wait_wake(0.05) is False
    client: Recording = queue.client  # type: ignore[assignment]
    assert client.blocked == []
    (slept,) = queue.slept  # type: ignore[attr-defined]
    assert 0.04 < slept <= 0.05


def test_a_longer_wait_pops_for_what_redis_can_time_then_sleeps_to_its_end(queue: ReadyQueue) -> None:
    assert queue.wait_wake(0.35) is False
    client: Recording = queue.client  # type: ignore[assignment]
    assert client.blocked == [pytest.approx(0.35 - BLOCK_RESOLUTION_S)]
    (slept,) = queue.slept  # type: ignore[attr-defined]
    assert 0.3 < slept <= 0.35  # this Redis returned at once: the rest of the wait is slept


@pytest.mark.parametrize("timeout_s", [0.05, 0.35])
def test_a_wake_up_already_there_ends_any_wait_at_once(queue: ReadyQueue, timeout_s: float) -> None:
    queue.client.rpush(queue.keys.wake(), b"1")
    assert queue.wait_wake(timeout_s) is True
    assert queue.slept == []  # type: ignore[attr-defined]
    assert queue.client.llen(queue.keys.wake()) == 0
