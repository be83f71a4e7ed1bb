"""Issue 16.3: a duecast-owned Redis key of the wrong type (a ready list or bell SET to a string) is
moved aside under `{prefix}:wrongtype:...`, logged and counted, and the source carries on at once.

Real Redis: what fakeredis does not check (Cluster slots aside), against the server the roles use.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator

import pytest

from duecast.shared.entries import Entry
from duecast.shared.fanout.client import connect_redis
from duecast.shared.fanout.keys import Keys
from duecast.shared.fanout.queue import ReadyQueue
from duecast.shared.fanout.retype import WRONG_TYPE_KEEP_S
from duecast.shared.settings import RedisSettings
from tests.integration import apps
from tests.integration.conftest import Env
from tests.integration.flow.roles_helpers import dispatch, handled_once, role_settings, work

pytestmark = pytest.mark.integration

SOURCE = "alpha"


@pytest.fixture
def queue(redis_settings: RedisSettings) -> Iterator[ReadyQueue]:
    q = ReadyQueue(connect_redis(redis_settings), Keys(redis_settings.key_prefix))
    yield q
    q.client.close()


def moved_aside(queue: ReadyQueue, key: str) -> dict[str, object]:
    """Every copy of `key` moved aside: its name -> the value it held (a string)."""
    pattern = queue.keys.wrong_type(key, "*")
    return {k.decode(): queue.client.get(k) for k in queue.client.scan_iter(match=pattern)}


def assert_moved_once(queue: ReadyQueue, key: str, value: bytes, caplog: pytest.LogCaptureFixture) -> None:
    aside = moved_aside(queue, key)
    assert list(aside.values()) == [value], aside
    name = next(iter(aside))
    assert 0 < queue.client.ttl(name) <= WRONG_TYPE_KEEP_S
    assert queue.client.type(key) in {b"list", b"none"}
    lines = [r.getMessage() for r in caplog.records if getattr(r, "event", None) == "queue.wrong_type_key"]
    assert len(lines) == 1, lines
    assert key in lines[0]
    assert name in lines[0]


def test_a_ready_list_set_to_a_string_is_moved_aside_by_the_push(
    queue: ReadyQueue, caplog: pytest.LogCaptureFixture
) -> None:
    ready = queue.keys.ready(SOURCE)
    queue.client.set(ready, b"oops")
    with caplog.at_level(logging.WARNING, "duecast.queue"):
        queue.push(SOURCE, [Entry(1, 1), Entry(2, 1)])
    assert queue.client.lrange(ready, 0, -1) == [b"1:1", b"2:1"]  # pushed once, not twice
    assert queue.client.lrange(queue.keys.bell(SOURCE), 0, -1) == [b"1"]
    assert queue.stats(SOURCE)["wrong_type_keys"] == 1
    assert_moved_once(queue, ready, b"oops", caplog)


def test_a_bell_set_to_a_string_is_moved_aside_and_the_entries_pushed_once(
    queue: ReadyQueue, caplog: pytest.LogCaptureFixture
) -> None:
    bell = queue.keys.bell(SOURCE)
    queue.client.set(bell, b"ding")
    with caplog.at_level(logging.WARNING, "duecast.queue"):
        queue.push(SOURCE, [Entry(1, 1)])  # the RPUSH lands, the ring fails: only the ring is redone
    assert queue.client.lrange(queue.keys.ready(SOURCE), 0, -1) == [b"1:1"]
    assert queue.client.lrange(bell, 0, -1) == [b"1"]
    assert_moved_once(queue, bell, b"ding", caplog)


@pytest.mark.parametrize("which", ["ready", "bell"])
def test_the_pop_and_hold_moves_a_wrong_type_aside_and_pops(
    queue: ReadyQueue, caplog: pytest.LogCaptureFixture, which: str
) -> None:
    queue.push("beta", [Entry(7, 1)])
    key = queue.keys.ready(SOURCE) if which == "ready" else queue.keys.bell(SOURCE)
    queue.client.set(key, b"garbage")
    with caplog.at_level(logging.WARNING, "duecast.queue"):
        assert queue.pop_held("w1", [SOURCE, "beta"], 10, 1.0) == ("beta", [b"7:1"])
        # The bell of an empty list is first touched by the wait on the bells: moved aside there.
        assert queue.pop_held("w2", [SOURCE], 10, 0.2) is None
    assert queue.held_by("w1") == ("beta", [b"7:1"])
    assert_moved_once(queue, key, b"garbage", caplog)
    assert queue.stats(SOURCE)["wrong_type_keys"] == 1


def test_an_idle_pop_with_a_wrong_type_bell_still_waits_and_wakes(queue: ReadyQueue) -> None:
    """Set between the pop's length check and the BLPOP on the bells: the wait moves it aside too."""
    bell = queue.keys.bell(SOURCE)
    queue.client.set(bell, b"x")
    checks = [(SOURCE, bell, "list")]
    assert queue._retype.call(checks, lambda: queue.client.blpop([bell], timeout=0.05)) is None
    assert queue.client.type(bell) == b"none"
    found: list[object] = []
    waiter = threading.Thread(target=lambda: found.append(queue.pop_held("w1", [SOURCE], 10, 3.0)))
    waiter.start()
    queue.push(SOURCE, [Entry(3, 1)])
    waiter.join(5)
    assert found == [(SOURCE, [b"3:1"])]


def test_plain_pop_length_stats_quarantine_and_wake_recover(queue: ReadyQueue) -> None:
    keys = queue.keys
    queue.client.set(keys.stats(SOURCE), b"not mine")
    queue.add_stats(SOURCE, {"acked": 3})
    assert queue.stats(SOURCE) == {"acked": 3, "wrong_type_keys": 1}  # counted in the new hash
    for key in (keys.ready(SOURCE), keys.quarantine(SOURCE), keys.wake()):
        queue.client.set(key, b"not mine")
    assert queue.length(SOURCE) == 0
    assert queue.pop([SOURCE], 10, 0.05) is None
    queue.quarantine(SOURCE, [(b"zz", "malformed")])
    assert queue.quarantined(SOURCE) == [b"malformed zz"]
    assert queue.wait_wake(0.05) is False
    assert queue.stats(SOURCE) == {"acked": 3, "wrong_type_keys": 3}  # stats, ready, quarantine
    assert queue.stats("-") == {"wrong_type_keys": 1}  # the wake-up list belongs to no source
    for key in (keys.ready(SOURCE), keys.stats(SOURCE), keys.quarantine(SOURCE), keys.wake()):
        assert len(moved_aside(queue, key)) == 1, key


def test_a_source_whose_ready_list_is_a_string_carries_on(
    make_env: Callable[..., Env], recorder: apps.Recorder, caplog: pytest.LogCaptureFixture
) -> None:
    """The fault as found: the ready list and the bell SET to strings before a dispatcher and a
    worker start; every due row is still handled once, by the production loops, without backing off."""
    env = make_env("rescan", rows=300, name=apps.RESCAN)
    settings = role_settings(env)
    env.queue.client.set(env.queue.keys.ready(apps.RESCAN), b"stray")
    env.queue.client.set(env.queue.keys.bell(apps.RESCAN), b"stray")
    with caplog.at_level(logging.WARNING):
        dispatch(settings)
        work(settings)
    handled_once(recorder, apps.RESCAN, range(1, 301))
    assert not [r for r in caplog.records if getattr(r, "event", None) == "loop.tick_failed"]
    assert env.queue.stats(apps.RESCAN)["wrong_type_keys"] == 2


def test_entries_lost_with_an_overwritten_ready_list_are_requeued_at_once(
    make_env: Callable[..., Env], recorder: apps.Recorder
) -> None:
    """A SET over a ready list full of entries took them: moving it aside also drops the epoch
    canary, so the next dispatcher tick requeues the dispatched rows (as after a FLUSHALL) instead of
    leaving them to the visibility timeout (an hour here, and no sweeper runs in drain mode)."""
    env = make_env("rescan", rows=300, name=apps.RESCAN, visibility_timeout_s=3600)
    settings = role_settings(env)
    dispatch(settings)
    assert env.queue.length(apps.RESCAN) == 300
    env.queue.client.set(env.queue.keys.ready(apps.RESCAN), b"stray")  # the 300 entries are gone
    started = time.monotonic()
    work(settings)  # the worker's pop meets the string first: moved aside, canary dropped
    dispatch(settings)  # the next tick sees the canary gone and requeues the 300 rows
    work(settings)
    took = time.monotonic() - started
    handled_once(recorder, apps.RESCAN, range(1, 301))
    assert took < 10, f"recovered in {took:.1f}s"


def test_a_hold_of_the_wrong_type_is_moved_aside_and_reads_as_none(queue: ReadyQueue) -> None:
    """Redelivery reads every dead worker's hold: one that is not a list (or an older release's
    string) must not stop the rest."""
    queue.client.hset(queue.keys.inflight("w1"), "x", "1")
    queue.push(SOURCE, [Entry(1, 1)])
    assert queue.pop_held("w2", [SOURCE], 10, 1.0) == (SOURCE, [b"1:1"])
    assert queue.held_by("w1") is None
    assert queue.held_by("w2") == (SOURCE, [b"1:1"])
    (aside,) = queue.client.scan_iter(match=queue.keys.wrong_type(queue.keys.inflight("w1"), "*"))
    assert queue.client.hgetall(aside) == {b"x": b"1"}
