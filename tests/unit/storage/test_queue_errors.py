"""The queue port translates redis-py's errors (shared/fanout/client.py): the roles meet QueueError or
QueueUnavailable, chained to redis-py's error, and the start-up line reads as before."""

from __future__ import annotations

from collections.abc import Iterator

import fakeredis
import pytest
import redis

from duecast.shared.entries import Entry
from duecast.shared.fanout.client import redis_problem, translate
from duecast.shared.fanout.keys import Keys
from duecast.shared.fanout.protocol import QueueError, QueueUnavailable
from duecast.shared.fanout.queue import ReadyQueue
from duecast.shared.process.failures import EXIT_CONFIG, EXIT_UNAVAILABLE, explain, transient_cause
from duecast.shared.process.runtime import check_redis


@pytest.fixture
def down() -> Iterator[ReadyQueue]:
    server = fakeredis.FakeServer()
    client = fakeredis.FakeRedis(server=server)
    server.connected = False  # every command now raises redis.ConnectionError
    yield ReadyQueue(client, Keys("unit-down"))
    client.close()


@pytest.mark.parametrize(
    "call",
    [
        lambda q: q.ping(),
        lambda q: q.push("alpha", [Entry(1, 1)]),
        lambda q: q.push_raw("alpha", [b"1:1"]),
        lambda q: q.length("alpha"),
        lambda q: q.pop(["alpha"], 1, 0.01),
        lambda q: q.pop_held("w1", ["alpha"], 1, 0.01),
        lambda q: q.release_hold("w1"),
        lambda q: q.release_hold("w1", {b"1": b"alpha\n1:1"}),
        lambda q: q.release_hold("w1", {b"1": b"alpha\n1:1"}, replace=True),
        lambda q: q.started_by("w1"),
        lambda q: q.forget_started("w1"),
        lambda q: q.held_by("w1"),
        lambda q: q.data_lost(),
        lambda q: q.eviction_policy(),
        lambda q: q.wait_wake(0.01),
        lambda q: q.quarantine("alpha", [(b"x", "malformed")]),
        lambda q: q.add_stats("alpha", {"acked": 1}),
        lambda q: q.stats("alpha"),
    ],
    ids=[
        "ping",
        "push",
        "push_raw",
        "length",
        "pop",
        "pop_held",
        "release_hold",
        "release_hold_started",
        "release_hold_replace",
        "started_by",
        "forget_started",
        "held_by",
        "data_lost",
        "eviction_policy",
        "wait_wake",
        "quarantine",
        "add_stats",
        "stats",
    ],
)
def test_every_port_operation_raises_duecast_error_when_redis_is_down(down: ReadyQueue, call: object) -> None:
    with pytest.raises(QueueUnavailable) as caught:
        call(down)  # type: ignore[operator]
    assert isinstance(caught.value.__cause__, redis.ConnectionError)
    assert str(caught.value).startswith("ConnectionError: ")  # what Redis said stays on the line


def test_a_refusal_is_a_queue_error_but_not_transient() -> None:
    refused = translate(redis.ResponseError("OOM command not allowed when used memory > 'maxmemory'"))
    assert type(refused) is QueueError
    auth = translate(redis.AuthenticationError("invalid username-password pair"))
    assert type(auth) is QueueError  # waiting cannot fix a wrong password
    timeout = translate(redis.TimeoutError("Timeout reading from socket"))
    assert type(timeout) is QueueUnavailable
    cluster = translate(redis.exceptions.RedisClusterException("Redis Cluster cannot be connected"))
    assert type(cluster) is QueueUnavailable  # a cluster client's own: no node answers
    other = ValueError("not Redis")
    assert translate(other) is other


def test_a_translated_error_explains_itself_as_redis_py_s_did(down: ReadyQueue) -> None:
    with pytest.raises(QueueUnavailable) as caught:
        down.length("alpha")
    mine, theirs = caught.value, caught.value.__cause__
    assert theirs is not None
    assert redis_problem(mine) == redis_problem(theirs)
    problem = explain(mine)
    assert problem is not None
    assert problem.code == EXIT_UNAVAILABLE
    assert "redis.url" in str(problem)
    cause = transient_cause(mine)  # the loop's one WARNING line, naming both
    assert cause is not None
    assert cause.startswith("QueueUnavailable: ConnectionError: ")


def test_refused_credentials_end_the_start_even_when_waiting() -> None:
    class Refusing(ReadyQueue):
        def ping(self) -> None:
            raise QueueError("AuthenticationError: invalid") from redis.AuthenticationError("invalid")

    queue = Refusing(fakeredis.FakeRedis(server=fakeredis.FakeServer()), Keys("unit-auth"))
    with pytest.raises(QueueError) as caught:
        check_redis(queue, wait=True)
    problem = explain(caught.value)
    assert problem is not None
    assert problem.code == EXIT_CONFIG


def test_an_unreachable_redis_only_warns_when_waiting(
    down: ReadyQueue, caplog: pytest.LogCaptureFixture
) -> None:
    check_redis(down, wait=True)
    assert any(getattr(r, "event", None) == "redis.unreachable" for r in caplog.records)
    with pytest.raises(QueueUnavailable):
        check_redis(down)
