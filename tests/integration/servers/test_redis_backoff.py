"""A role's backoff after Redis failed ends as soon as Redis answers again (issue 24.10: requeueing
started only 4.8-5.2 s after Redis was back, the roles' error backoff), on a private redis-server
stopped and started by the test; a down Redis sees about one PING per PROBE_EVERY_S meanwhile."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from pydantic import SecretStr

from duecast.shared.entries import Entry
from duecast.shared.fanout.client import connect_redis
from duecast.shared.fanout.keys import Keys
from duecast.shared.fanout.queue import ReadyQueue
from duecast.shared.process.loop import PROBE_EVERY_S, Tick, run
from duecast.shared.settings import RedisSettings
from tests.faults.private_redis import PrivateRedis
from tests.faults.procs import wait_for

pytestmark = pytest.mark.integration
PREFIX = "duecast-test-backoff"


class Popper:
    """A role that pops: each tick's outcome and time are recorded."""

    name = "popper"

    def __init__(self, queue: ReadyQueue) -> None:
        self.queue = queue
        self.failures: list[float] = []
        self.successes: list[float] = []

    def tick(self) -> Tick:
        try:
            self.queue.pop(["a"], 10, 0.05)
        except Exception:
            self.failures.append(time.monotonic())
            raise
        self.successes.append(time.monotonic())
        return Tick(0.05, idle=True)


class CountingProbe:
    def __init__(self, queue: ReadyQueue) -> None:
        self.queue = queue
        self.calls: list[float] = []

    def __call__(self) -> None:
        self.calls.append(time.monotonic())
        self.queue.ping()


@pytest.fixture
def server(tmp_path: Path) -> Iterator[PrivateRedis]:
    started = PrivateRedis(tmp_path)
    started.start()
    try:
        yield started
    finally:
        started.kill()
        started.client.close()


def test_the_loop_retries_within_a_probe_of_redis_answering_again(server: PrivateRedis) -> None:
    settings = RedisSettings(url=SecretStr(server.url), key_prefix=PREFIX, socket_timeout_s=1)
    queue = ReadyQueue(connect_redis(settings), Keys(PREFIX))
    queue.push("a", [Entry(1, 1)])
    role, probe, stop = Popper(queue), CountingProbe(queue), threading.Event()
    # A backoff of 8-16 s after the first failure: without the probe the role would still sleep.
    loop = threading.Thread(target=run, args=(role, stop), kwargs={"error_base_s": 16.0, "probe": probe})
    loop.start()
    try:
        wait_for(lambda: role.successes, 10, "the role to pop")
        server.kill()
        wait_for(lambda: role.failures, 10, "the role's tick to fail on the stopped server")
        wait_for(lambda: len(probe.calls) >= 4, 10, "the backoff to probe the stopped server")
        down_for = probe.calls[-1] - probe.calls[0]
        assert down_for >= (len(probe.calls) - 1) * PROBE_EVERY_S * 0.9  # no hammering: one per interval
        server.start()
        back_at = time.monotonic()
        wait_for(lambda: role.successes and role.successes[-1] > back_at, 10, "the role to pop again")
        took = role.successes[-1] - back_at
        print(f"\nthe role popped again {took:.2f}s after Redis answered")
        assert took < 2 * PROBE_EVERY_S + 0.5
    finally:
        stop.set()
        loop.join(20)
