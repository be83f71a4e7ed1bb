"""A batch a worker hands back (MySQL failing past worker.unit_retry_s) goes ahead of the backlog:
it was popped once already, and behind 10,000 fresh entries it would wait for all of them."""

from __future__ import annotations

import fakeredis

from duecast.shared.entries import Entry
from duecast.shared.fanout.keys import Keys
from duecast.shared.fanout.queue import ReadyQueue
from duecast.worker.starting import hand_back


def test_a_handed_back_batch_is_popped_before_a_backlog_of_10000(fake_redis: fakeredis.FakeRedis) -> None:
    queue = ReadyQueue(fake_redis, Keys("unit-hb"))
    queue.push("alpha", [Entry(i, 1) for i in range(10_000)])
    hand_back(queue, None, "alpha", [b"20001:2", b"20002:2"])
    assert queue.pop(["alpha"], 3, 0.1) == ("alpha", [b"20001:2", b"20002:2", b"0:1"])
