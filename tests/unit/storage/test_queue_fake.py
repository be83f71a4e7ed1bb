"""The ReadyQueue contract (tests/unit/queue_contract.py) against fakeredis."""

from __future__ import annotations

import fakeredis
import pytest

from duecast.shared.fanout.keys import Keys
from duecast.shared.fanout.queue import ReadyQueue
from tests.unit.queue_contract import QueueContract


class TestFakeQueue(QueueContract):
    @pytest.fixture
    def queue(self, fake_redis: fakeredis.FakeRedis) -> ReadyQueue:
        return ReadyQueue(fake_redis, Keys("unit-q"))
