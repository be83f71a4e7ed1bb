"""The ReadyQueue contract (tests/unit/queue_contract.py) against the real Redis server.

Same suite as the fakeredis run, so the fake cannot drift from BLMPOP, LTRIM and HINCRBY as Redis
really does them. Keys live under the test's private prefix and are deleted afterwards.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from duecast.shared.fanout.client import connect_redis
from duecast.shared.fanout.keys import Keys
from duecast.shared.fanout.queue import ReadyQueue
from duecast.shared.settings import RedisSettings
from tests.unit.queue_contract import QueueContract

pytestmark = pytest.mark.integration


class TestRealQueue(QueueContract):
    @pytest.fixture
    def queue(self, redis_settings: RedisSettings) -> Iterator[ReadyQueue]:
        client = connect_redis(redis_settings)
        yield ReadyQueue(client, Keys(redis_settings.key_prefix))
        client.close()
