"""The supervisor's hand-back of re-scan rows (issue 24.4): rows record no worker in MySQL, so what an
exited worker had started is read from its started records in Redis, and only those rows still
RUNNING under that attempt are due again now; a live worker's rows, and a row the exited one acked,
are untouched. Real MariaDB and Redis; the two "workers" are names, each with a store of its own."""

from __future__ import annotations

import pytest

from duecast.dispatcher.dispatcher import Dispatcher
from duecast.dispatcher.redelivery import Redelivery
from duecast.shared.acks import Ack
from duecast.shared.entries import encode_entry, encode_hold
from duecast.worker.handback import Handback
from tests.integration.flow.store_helpers import IDLE, RUNNING, MakeEnv

pytestmark = pytest.mark.integration
EXITED, LIVE = "host-a:201", "host-a:202"
WHY = "interrupted: its worker process was killed by SIGKILL before finishing it"


def test_an_exited_workers_started_rescan_rows_are_due_at_once_and_pushed_first(make_env: MakeEnv) -> None:
    env = make_env("rescan", rows=8)
    name, queue = env.source.name, env.queue
    entries = env.store.claim_due(8)
    assert sorted(e.id for e in entries) == list(range(1, 9))
    mine = sorted(entries, key=lambda e: e.id)
    exited = env.store.start(mine[:4])
    live = env.other_store().start(mine[4:])
    for worker, part in ((EXITED, mine[:4]), (LIVE, mine[4:])):  # as each worker's Starter records it
        queue.release_hold(worker, {b"0": encode_hold(name, [encode_entry(e.id, e.attempt) for e in part])})
    assert exited.ack([(exited.rows[0], Ack.touch())]).acked == 1  # row 1: done before the exit
    exited.close()  # the process is gone: nobody renews its leases

    back = Handback(env.settings).after_exit(EXITED, WHY)

    assert (back.requeued, back.interrupted, back.held, back.complete) == (3, 0, 0, True)
    states = env.states()
    assert {i: states[i] for i in (2, 3, 4)} == dict.fromkeys((2, 3, 4), (IDLE, 1))
    assert {i: states[i] for i in range(5, 9)} == dict.fromkeys(range(5, 9), (RUNNING, 1))
    assert queue.started_by(EXITED) == []
    assert [s for s, _ in queue.started_by(LIVE)] == [name]
    # Due at once, and ahead of what is queued already.
    queue.push_raw(name, [b"999999:1"] * 100)
    redelivery = Redelivery([], queue, {"lost": 1.0}, 100)
    Dispatcher([env.store], queue, env.settings.dispatcher, redelivery).tick()
    popped = queue.pop([name], 3, 0.1)
    assert popped is not None
    assert sorted(popped[1]) == [b"2:2", b"3:2", b"4:2"]
    live.close()
