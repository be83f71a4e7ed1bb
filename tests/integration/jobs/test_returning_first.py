"""Redelivered work goes ahead of the backlog (issue 24, item 6): a claim's runs that come back (given
back, requeued) are pushed to the head of the ready list, so with 10,000 entries queued they are
popped first."""

from __future__ import annotations

import pytest

from duecast.dispatcher.dispatcher import Dispatcher
from duecast.dispatcher.redelivery import Redelivery
from duecast.shared.entries import Entry
from duecast.shared.fanout.client import connect_redis
from duecast.shared.fanout.keys import Keys
from duecast.shared.fanout.queue import ReadyQueue
from tests.integration.jobs.jobs_env import JobsEnv

pytestmark = pytest.mark.integration


def test_a_requeued_run_is_popped_before_a_backlog_of_10000(env: JobsEnv) -> None:
    env = env.with_jobs(run_size=1)  # an entry per job: 10,000 queued are under high_water (40,000)
    store = env.store()
    queue = ReadyQueue(connect_redis(env.settings.redis), Keys(env.settings.redis.key_prefix))
    name = store.src.name
    env.enqueuer.enqueue("record", "back")
    (first,) = store.claim_due(10)
    assert store.returning == 0  # new work
    assert store.release_unpushed([first]) == 1  # its push was lost: pending again, to come back
    queue.push(name, [Entry(10**9 + i, 1) for i in range(10_000)])  # the backlog it waited behind
    redelivery = Redelivery([], queue, {"lost": 1.0}, 100)
    dispatcher = Dispatcher([store], queue, env.settings.dispatcher, redelivery)
    dispatcher.tick()
    assert store.returning == 1
    popped = queue.pop([name], 1, 0.1)
    assert popped == (name, [b"%d:%d" % (first.id, first.attempt + 1)])
    assert queue.length(name) == 10_000
