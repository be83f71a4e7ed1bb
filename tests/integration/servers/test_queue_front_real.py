"""ReadyQueue.push_front against the real Redis server (the fakeredis run: tests/unit/storage/
test_queue_front.py): with 10,000 entries queued, work pushed back is popped first."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from duecast.shared.fanout.client import connect_redis
from duecast.shared.fanout.keys import Keys
from duecast.shared.fanout.queue import ReadyQueue
from duecast.shared.settings import RedisSettings
from tests.unit.storage.test_queue_front import check_bell_rings, check_pushed_to_front

pytestmark = pytest.mark.integration


@pytest.fixture
def queue(redis_settings: RedisSettings) -> Iterator[ReadyQueue]:
    client = connect_redis(redis_settings)
    yield ReadyQueue(client, Keys(redis_settings.key_prefix))
    client.close()


def test_work_pushed_back_is_popped_before_a_backlog_of_10000(queue: ReadyQueue) -> None:
    check_pushed_to_front(queue)


def test_a_push_to_the_front_wakes_a_waiting_worker(queue: ReadyQueue) -> None:
    check_bell_rings(queue)
