"""The Sentinel-managed master's pool (fanout.sentinel, issue 24): it asks the Sentinels at most once per
check interval from the commands themselves, drops its connections to a replaced master, carries on
when no Sentinel answers, and a switch makes the dispatcher's canary requeue.
Fakes; the clock is a variable."""

from __future__ import annotations

import os
from typing import Any

import pytest
from redis.sentinel import MasterNotFoundError

from duecast.shared.fanout import sentinel
from duecast.shared.fanout.keys import Keys
from duecast.shared.fanout.queue import ReadyQueue
from duecast.shared.fanout.sentinel import FollowingMasterPool

A = ("10.0.0.1", 6379)
B = ("10.0.0.2", 6379)


class FakeSentinels:
    """What SentinelConnectionPool asks: the master's address, or no answer."""

    def __init__(self) -> None:
        self.master: tuple[str, int] | None = A
        self.asked = 0

    def discover_master(self, service_name: str) -> tuple[str, int]:
        self.asked += 1
        if self.master is None:
            raise MasterNotFoundError(f"No master found for {service_name!r}")
        return self.master


class FakeConnection:
    """Connects where the pool's proxy says the master is, as SentinelManagedConnection does."""

    def __init__(self, connection_pool: Any, **_: Any) -> None:
        self.proxy = connection_pool
        self.host: str | None = None
        self.port: int | None = None
        self.connected = False
        self.pid = os.getpid()

    def connect(self) -> None:
        if not self.connected:
            self.host, self.port = self.proxy.get_master_address()
            self.connected = True

    def disconnect(self, *_: Any, **__: Any) -> None:
        self.connected = False

    def can_read(self) -> bool:
        return False

    def should_reconnect(self) -> bool:
        return False

    def re_auth(self) -> None:
        """What redis-py's release event calls: nothing to do without a credential provider."""


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def made() -> tuple[FollowingMasterPool, FakeSentinels, Clock]:
    sentinels, clock = FakeSentinels(), Clock()
    pool = FollowingMasterPool("svc", sentinels, connection_class=FakeConnection)
    pool.clock = clock
    return pool, sentinels, clock


def one_command(pool: FollowingMasterPool) -> FakeConnection:
    """A command's use of the pool: take a connection, give it back."""
    connection: FakeConnection = pool.get_connection()
    pool.release(connection)
    return connection


def on(pool: FollowingMasterPool, address: tuple[str, int]) -> list[FakeConnection]:
    """The pool's connections open to `address`."""
    every = [*pool._available_connections, *pool._in_use_connections]
    return [c for c in every if c.connected and (c.host, c.port) == address]


def test_the_sentinels_are_asked_at_most_once_per_interval(made: Any) -> None:
    pool, sentinels, clock = made
    first = one_command(pool)
    asked = sentinels.asked  # the check and the first connection's own look-up
    for _ in range(50):
        assert one_command(pool) is first
    assert sentinels.asked == asked  # no look-up between checks
    clock.now += sentinel.CHECK_INTERVAL_S
    one_command(pool)
    assert sentinels.asked == asked + 1


def test_a_new_master_takes_the_next_command_after_the_check(made: Any) -> None:
    pool, sentinels, clock = made
    old = one_command(pool)
    assert (old.host, old.port) == A
    sentinels.master = B
    assert one_command(pool) is old  # before the check the pool does not know
    clock.now += sentinel.CHECK_INTERVAL_S
    new = one_command(pool)
    assert (new.host, new.port) == B
    assert not on(pool, A)  # the old master's connections closed (redis-py reuses the objects)
    assert pool.switches == 1


def test_a_switch_is_counted_when_a_new_connection_saw_it_first(made: Any) -> None:
    pool, sentinels, clock = made
    held: FakeConnection = pool.get_connection()
    sentinels.master = B
    second: FakeConnection = pool.get_connection()  # the pool grows: its connect asks the Sentinels
    assert (second.host, second.port) == B
    clock.now += sentinel.CHECK_INTERVAL_S
    one_command(pool)
    assert pool.switches == 1  # the canary must still hear of it
    pool.release(held)
    pool.release(second)
    assert not on(pool, A)


def test_a_connection_in_use_at_the_switch_is_closed_when_released(made: Any) -> None:
    pool, sentinels, clock = made
    held: FakeConnection = pool.get_connection()  # a worker's pop blocking on the old master
    sentinels.master = B
    clock.now += sentinel.CHECK_INTERVAL_S
    other = one_command(pool)
    assert (other.host, other.port) == B
    assert held.connected  # nobody closes a socket under a running command
    pool.release(held)
    assert not held.connected
    assert held not in pool._available_connections  # never handed out again


def test_sentinels_that_do_not_answer_never_fail_a_command(made: Any) -> None:
    pool, sentinels, clock = made
    first = one_command(pool)
    sentinels.master = None
    clock.now += sentinel.CHECK_INTERVAL_S
    asked = sentinels.asked
    assert one_command(pool) is first  # the check failed; the command had its connection
    assert sentinels.asked == asked + 1
    clock.now += sentinel.FAILED_CHECK_INTERVAL_S - 0.1
    one_command(pool)
    assert sentinels.asked == asked + 1  # a failed check waits longer before the next
    sentinels.master = B
    clock.now += 0.1
    new = one_command(pool)
    assert (new.host, new.port) == B
    assert not on(pool, A)


def test_a_master_switch_makes_the_canary_requeue(fake_redis: Any) -> None:
    """What a pusher sent to the old master before its check is lost at the demotion, and workers
    that moved first never pop it: the dispatcher's canary takes a switch for lost entries, once."""
    queue = ReadyQueue(fake_redis, Keys("unit-switch"))
    assert queue.data_lost()  # first use: the canary was never set
    assert not queue.data_lost()
    fake_redis.connection_pool.switches = 1  # what FollowingMasterPool counts
    assert queue.data_lost()
    assert not queue.data_lost()
