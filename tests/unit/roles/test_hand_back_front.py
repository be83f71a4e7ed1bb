"""A batch a worker hands back (MySQL failing past worker.unit_retry_s) goes ahead of the backlog:
it was popped once already, and behind 10,000 fresh entries it would wait for all of them."""

from __future__ import annotations

from typing import Any

import fakeredis

from duecast.shared.entries import Entry
from duecast.shared.fanout.keys import Keys
from duecast.shared.fanout.queue import ReadyQueue
from duecast.shared.settings import WorkerSettings
from duecast.worker.acker import Acker
from duecast.worker.starting import Starter, hand_back


def test_a_handed_back_batch_is_popped_before_a_backlog_of_10000(fake_redis: fakeredis.FakeRedis) -> None:
    queue = ReadyQueue(fake_redis, Keys("unit-hb"))
    queue.push("alpha", [Entry(i, 1) for i in range(10_000)])
    hand_back(queue, None, "alpha", [b"20001:2", b"20002:2"])
    assert queue.pop(["alpha"], 3, 0.1) == ("alpha", [b"20001:2", b"20002:2", b"0:1"])


def test_a_worker_fencing_itself_hands_back_what_it_popped_and_did_not_start(
    fake_redis: fakeredis.FakeRedis,
) -> None:
    """Its lease keeper's last words (keeper.last_words): the hold goes back to the head at once."""
    queue = ReadyQueue(fake_redis, Keys("unit-hb-fence"))
    queue.push("alpha", [Entry(i, 1) for i in range(1, 6)])
    assert queue.pop_held("w1", ["alpha"], [3], 0.1) == ("alpha", [b"1:1", b"2:1", b"3:1"])
    runners: Any = (None, None)  # never reached: nothing is started
    starter = Starter({}, {}, queue, WorkerSettings(), process="w1", acker=Acker(0.1), runners=runners)
    starter.hand_back_held()
    assert queue.held_by("w1") is None
    assert queue.pop(["alpha"], 5, 0.1) == ("alpha", [b"1:1", b"2:1", b"3:1", b"4:1", b"5:1"])
    starter.hand_back_held()  # nothing held: nothing pushed
    assert queue.length("alpha") == 0
