"""Work coming back goes ahead of the backlog (issue 24, item 6): ReadyQueue.push_front, against
fakeredis here and real Redis in tests/integration/servers/test_queue_front_real.py."""

from __future__ import annotations

import fakeredis
import pytest

from duecast.shared.entries import Entry
from duecast.shared.fanout.keys import Keys
from duecast.shared.fanout.queue import ReadyQueue

BACKLOG = 10_000


def check_pushed_to_front(queue: ReadyQueue) -> None:
    """With 10,000 entries queued, entries pushed back are popped first, in their order, and the
    backlog after them as it was."""
    queue.push("alpha", [Entry(i, 1) for i in range(BACKLOG)])
    queue.push_front("alpha", [b"20001:2", b"20002:3"])
    assert queue.length("alpha") == BACKLOG + 2
    assert queue.pop(["alpha"], 3, 0.1) == ("alpha", [b"20001:2", b"20002:3", b"0:1"])
    assert queue.pop(["alpha"], 1, 0.1) == ("alpha", [b"1:1"])
    queue.push_front("alpha", [b"1:1"])  # a worker hands its batch back
    assert queue.pop(["alpha"], 2, 0.1) == ("alpha", [b"1:1", b"2:1"])


def check_bell_rings(queue: ReadyQueue) -> None:
    """A push to the front rings the source's bell, as any push does (a waiting worker wakes)."""
    queue.push_front("beta", [b"7:1"])
    assert queue.client.lrange(queue.keys.bell("beta"), 0, -1) == [b"1"]


@pytest.fixture
def queue(fake_redis: fakeredis.FakeRedis) -> ReadyQueue:
    return ReadyQueue(fake_redis, Keys("unit-front"))


def test_work_pushed_back_is_popped_before_a_backlog_of_10000(queue: ReadyQueue) -> None:
    check_pushed_to_front(queue)


def test_a_push_to_the_front_wakes_a_waiting_worker(queue: ReadyQueue) -> None:
    check_bell_rings(queue)
