"""Every ReadyQueue call through a Sentinel-built and a Cluster-built client, on private servers.

The servers (one master + one Sentinel; three cluster masters) run on free ports from a tmp dir and
are killed afterwards; the shared Redis is never touched.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import pytest
import redis
from pydantic import SecretStr

from duecast.shared.entries import Entry
from duecast.shared.fanout.client import connect_redis
from duecast.shared.fanout.keys import Keys
from duecast.shared.fanout.queue import ReadyQueue
from duecast.shared.settings import RedisSettings
from tests.faults.private_redis import cluster_ports, free_ports, redis_server_bin
from tests.faults.procs import wait_for
from tests.faults.redis_ha import Servers, answers, plain

PREFIX = "duecast-test-topology"


@pytest.fixture
def servers(tmp_path: Path) -> Iterator[Servers]:
    started = Servers(tmp_path)
    try:
        yield started
    finally:
        started.kill_all()


def _exercise(queue: ReadyQueue) -> None:
    """Each call shared/fanout/queue.py makes: variadic RPUSH, BLMPOP over several keys, the pop-and-hold
    script (EVALSHA, reloaded after SCRIPT FLUSH) and its BLPOP on bells, pipelines, SET NX, GET/DEL,
    CONFIG GET (allowed or not) and BLPOP."""
    queue.push("a", [Entry(1, 1), Entry(2, 1)])
    queue.push("b", [Entry(3, 2)])
    assert queue.length("a") == 2
    assert queue.pop(["empty", "b", "a"], 10, 1.0) == ("b", [b"3:2"])
    assert queue.pop(["empty", "b", "a"], 10, 1.0) == ("a", [b"1:1", b"2:1"])
    assert queue.pop(["empty", "b", "a"], 10, 0.1) is None
    queue.quarantine("a", [(b"x", "malformed")])
    assert queue.quarantined("a") == [b"malformed x"]
    queue.add_stats("a", {"done": 2, "failed": 0})
    assert queue.stats("a") == {"done": 2}
    queue.push("a", [Entry(1, 1), Entry(2, 1)])
    assert queue.pop_held("w1", ["empty", "a"], 10, 1.0) == ("a", [b"1:1", b"2:1"])
    assert queue.held_by("w1") == ("a", [b"1:1", b"2:1"])
    queue.client.script_flush()  # a failover or restart forgets scripts: NOSCRIPT, then loaded again
    queue.push("b", [Entry(4, 1)])
    assert queue.pop_held("w1", ["empty", "a", "b"], 10, 1.0) == ("b", [b"4:1"])
    assert queue.held_by("w1") == ("b", [b"4:1"])
    assert queue.pop_held("w1", ["empty", "a", "b"], 10, 0.1) is None  # waits on the bells, then none
    queue.release_hold("w1")
    assert queue.held_by("w1") is None
    assert queue.data_lost() is True
    assert queue.data_lost() is False
    assert queue.eviction_policy() in {"noeviction", None}
    queue.client.rpush(queue.keys.wake(), b"1")
    assert queue.wait_wake(1.0) is True


def test_ready_queue_through_sentinel(servers: Servers) -> None:
    master, sentinel = free_ports(2)
    servers.start("master", *plain(master))
    conf = servers.workdir / "sentinel.conf"
    conf.write_text(
        f"port {sentinel}\nbind 127.0.0.1\ndir {servers.workdir}\n"
        f"sentinel monitor duecast-test 127.0.0.1 {master} 1\n"
    )
    servers.start("sentinel", str(conf), "--sentinel")
    wait_for(lambda: answers(master, "PING"), 10, "the private master")
    wait_for(
        lambda: answers(sentinel, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", "duecast-test"), 10, "the sentinel"
    )
    settings = RedisSettings(
        # The host is never used with Sentinels: a name that does not resolve proves it.
        url=SecretStr("redis://not-used.invalid:1/3"),
        key_prefix=PREFIX,
        sentinels=[f"127.0.0.1:{sentinel}"],
        sentinel_service="duecast-test",
    )
    client = connect_redis(settings)
    _exercise(ReadyQueue(client, Keys(PREFIX)))
    assert client.connection_pool.connection_kwargs["db"] == 3
    assert redis.Redis(port=master, db=3).exists(f"{{{PREFIX}}}:ready:a") == 0  # popped, and in db 3
    assert redis.Redis(port=master, db=3).exists(Keys(PREFIX).epoch()) == 1


def test_ready_queue_through_cluster(servers: Servers) -> None:
    ports = cluster_ports(3)
    for port in ports:
        servers.start(
            f"node{port}", *plain(port), "--cluster-enabled", "yes", "--cluster-config-file", f"n{port}.conf"
        )
    for port in ports:
        wait_for(partial(answers, port, "PING"), 10, f"cluster node {port}")
    subprocess.run(
        [
            str(Path(redis_server_bin()).with_name("redis-cli")),
            "--cluster",
            "create",
            *(f"127.0.0.1:{p}" for p in ports),
            "--cluster-yes",
        ],
        check=True,
        capture_output=True,
        timeout=30,
    )
    wait_for(
        lambda: all(redis.Redis(port=p).cluster("INFO").get("cluster_state") == "ok" for p in ports),
        20,
        "the private cluster to be ok",
    )
    settings = RedisSettings(
        url=SecretStr(f"redis://127.0.0.1:{ports[0]}/0"), key_prefix=PREFIX, cluster=True
    )
    client = connect_redis(settings)
    assert type(client).__name__ == "RedisCluster"
    _exercise(ReadyQueue(client, Keys(PREFIX)))
