"""Unit-tier fixtures: a hermetic environment (no DUECAST_* from outside) and in-memory Redis.

Nothing here opens a socket: Redis is fakeredis, MySQL is replaced by the fakes in tests/unit/fakes.py.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import fakeredis
import pytest

from duecast.shared.fanout.keys import Keys
from duecast.shared.fanout.queue import ReadyQueue


@pytest.fixture(autouse=True)
def _hermetic_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Settings read DUECAST_* case-insensitively and scripts/dev exports some: none may leak in."""
    for name in list(os.environ):
        if name.upper().startswith("DUECAST_"):
            monkeypatch.delenv(name)


@pytest.fixture
def fake_redis() -> Iterator[fakeredis.FakeRedis]:
    """A private in-memory server per test, so no state crosses tests."""
    client = fakeredis.FakeRedis(server=fakeredis.FakeServer())
    yield client
    client.close()


@pytest.fixture
def ready_queue(fake_redis: fakeredis.FakeRedis) -> ReadyQueue:
    return ReadyQueue(fake_redis, Keys("unit"))
