"""ReadyQueue.pop_held on the real Redis: the pop and the worker's hold are one MULTI (SORT ... STORE onto the
hold list, no scripting), so an entry is always in its list or in a hold, never in between; idle
workers wait on the bells; lists are served in turn.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator

import pytest

from duecast.shared.entries import Entry
from duecast.shared.fanout.client import connect_redis
from duecast.shared.fanout.keys import Keys
from duecast.shared.fanout.queue import ReadyQueue
from duecast.shared.settings import RedisSettings

pytestmark = pytest.mark.integration

MakeQueue = Callable[[], ReadyQueue]


@pytest.fixture
def make_queue(redis_settings: RedisSettings) -> Iterator[MakeQueue]:
    """ReadyQueues on the test's private prefix, each with its own client (one per "process")."""
    queues: list[ReadyQueue] = []

    def make() -> ReadyQueue:
        queues.append(ReadyQueue(connect_redis(redis_settings), Keys(redis_settings.key_prefix)))
        return queues[-1]

    yield make
    for queue in queues:
        queue.client.close()


def _raws(ids: range) -> list[bytes]:
    return [b"%d:1" % i for i in ids]


def _push(queue: ReadyQueue, source: str, ids: range) -> None:
    queue.push(source, [Entry(i, 1) for i in ids])


def test_the_batch_is_held_when_the_pop_returns_and_the_next_pop_replaces_it(make_queue: MakeQueue) -> None:
    queue = make_queue()
    _push(queue, "alpha", range(1, 6))
    assert queue.pop_held("w1", ["alpha"], 3, 1.0) == ("alpha", _raws(range(1, 4)))
    assert queue.held_by("w1") == ("alpha", _raws(range(1, 4)))
    assert queue.length("alpha") == 2
    assert queue.pop_held("w1", ["alpha"], 3, 1.0) == ("alpha", _raws(range(4, 6)))
    assert queue.held_by("w1") == ("alpha", _raws(range(4, 6)))
    queue.release_hold("w1")
    assert queue.held_by("w1") is None


def test_it_pops_the_first_non_empty_source_in_order(make_queue: MakeQueue) -> None:
    queue = make_queue()
    _push(queue, "gamma", range(1, 3))
    _push(queue, "beta", range(3, 4))
    assert queue.pop_held("w1", ["alpha", "beta", "gamma"], 10, 1.0) == ("beta", _raws(range(3, 4)))
    assert queue.held_by("w1") == ("beta", _raws(range(3, 4)))
    assert queue.pop_held("w1", ["alpha", "beta", "gamma"], 10, 1.0) == ("gamma", _raws(range(1, 3)))
    assert queue.held_by("w1") == ("gamma", _raws(range(1, 3)))


def test_no_snapshot_ever_finds_an_entry_outside_its_list_and_every_hold(make_queue: MakeQueue) -> None:
    """Atomic snapshots (MULTI) taken by another client while a worker pops find every entry exactly
    once, in the list or in a hold. A hold written after the pop, as its own command, fails this."""
    popper, observer = make_queue(), make_queue()
    total, count = 3000, 10
    _push(popper, "alpha", range(1, total + 1))
    names = [f"w{n}" for n in range(total // count)]  # a fresh hold per pop: none is released
    errors: list[BaseException] = []

    def pop_all() -> None:
        try:
            for name in names:
                assert popper.pop_held(name, ["alpha"], count, 1.0) is not None
        except BaseException as exc:  # reported by the test thread
            errors.append(exc)

    thread = threading.Thread(target=pop_all)
    thread.start()
    everything = set(_raws(range(1, total + 1)))
    snapshots = 0
    while thread.is_alive():
        pipe = observer.client.pipeline(transaction=True)
        pipe.lrange(observer.keys.ready("alpha"), 0, -1)
        for name in names:
            pipe.lrange(observer.keys.inflight(name), 1, -1)  # the source name first, then entries
        ready, *holds = pipe.execute()
        seen = list(ready)
        for hold in holds:
            seen += hold
        assert len(seen) == total, f"snapshot {snapshots}"
        assert set(seen) == everything, f"snapshot {snapshots}"
        snapshots += 1
    thread.join()
    assert not errors
    assert snapshots >= 5, "the pops ended before the snapshots could check them"
    assert popper.length("alpha") == 0


def test_an_idle_pop_waits_on_the_bells_and_a_push_wakes_it(make_queue: MakeQueue) -> None:
    worker, dispatcher = make_queue(), make_queue()
    push = threading.Timer(0.3, _push, (dispatcher, "beta", range(7, 8)))
    started = time.monotonic()
    push.start()
    try:
        popped = worker.pop_held("w1", ["alpha", "beta"], 10, 1.9)
    finally:
        push.join()
    waited = time.monotonic() - started
    assert popped == ("beta", [b"7:1"])
    assert worker.held_by("w1") == popped
    assert 0.25 <= waited < 1.5, "woken by the push's bell, not by the timeout"


def test_a_bell_whose_entries_are_gone_does_not_end_the_wait(make_queue: MakeQueue) -> None:
    queue = make_queue()
    _push(queue, "alpha", range(1, 2))
    assert queue.pop(["alpha"], 10, 0.1) is not None  # took the entry, left its token
    started = time.monotonic()
    assert queue.pop_held("w1", ["alpha"], 10, 0.5) is None
    assert time.monotonic() - started >= 0.4
    assert queue.client.llen(queue.keys.bell("alpha")) == 0
    assert queue.held_by("w1") is None


def test_what_a_pop_leaves_wakes_the_next_idle_worker(make_queue: MakeQueue) -> None:
    """One push rings once; a pop that leaves entries rings again, so a second idle worker wakes too."""
    dispatcher = make_queue()
    workers = {name: make_queue() for name in ("w1", "w2")}
    popped: dict[str, tuple[str, list[bytes]] | None] = {}

    def work(name: str) -> None:
        popped[name] = workers[name].pop_held(name, ["alpha"], 3, 1.9)

    threads = [threading.Thread(target=work, args=(name,)) for name in workers]
    for thread in threads:
        thread.start()
    time.sleep(0.2)  # setup, not an assertion: let both block (either order passes)
    pushed = time.monotonic()
    _push(dispatcher, "alpha", range(1, 7))
    for thread in threads:
        thread.join()
    assert time.monotonic() - pushed < 1.0, "both woken by bells, not by the timeout"
    batches = [popped[name] for name in workers]
    assert [len(b[1]) if b else 0 for b in batches] == [3, 3]
    assert sorted(raw for b in batches if b for raw in b[1]) == sorted(_raws(range(1, 7)))


def test_a_large_batch_of_any_bytes_goes_whole_into_the_hold(make_queue: MakeQueue) -> None:
    queue = make_queue()
    raws = [*_raws(range(1, 10_001)), b"\xff\xfe:1", b"x" * 1000]
    queue.push_raw("alpha", raws)
    assert queue.pop_held("w1", ["alpha"], len(raws), 1.0) == ("alpha", raws)
    assert queue.held_by("w1") == ("alpha", raws)


def test_a_nearly_spent_timeout_never_blocks(make_queue: MakeQueue) -> None:
    queue = make_queue()
    started = time.monotonic()
    assert queue.pop_held("w1", ["alpha"], 10, 0.0005) is None  # Redis would read 0 as "forever"
    assert time.monotonic() - started < 1.0


def test_each_list_is_popped_by_its_own_count(make_queue: MakeQueue) -> None:
    """A worker serving a range source (an entry is a span of ids) and jobs (an entry is a job)
    takes 2 spans or 50 jobs per pop, not 2 of each."""
    queue = make_queue()
    _push(queue, "spans", range(1, 4))
    _push(queue, "jobs", range(100, 200))
    assert queue.pop_held("w1", ["spans", "jobs"], [2, 50], 1.0) == ("spans", _raws(range(1, 3)))
    assert queue.pop_held("w1", ["spans", "jobs"], [2, 50], 1.0) == ("jobs", _raws(range(100, 150)))
    assert queue.held_by("w1") == ("jobs", _raws(range(100, 150)))
    assert queue.pop_held("w1", ["spans", "jobs"], [2, 50], 1.0) == ("spans", _raws(range(3, 4)))
    with pytest.raises(ValueError, match="a count >= 1 for each of 2 sources"):
        queue.pop_held("w1", ["spans", "jobs"], [2], 1.0)
    with pytest.raises(ValueError, match="a count >= 1"):
        queue.pop_held("w1", ["spans", "jobs"], [2, 0], 1.0)
