"""Private Redis topologies for the HA tests: a Sentinel-managed master with a replica and three
Sentinels, and a Redis Cluster of three masters with a replica each (and a live reshard of one of its
slots). Every server runs on a free port from the test's tmp dir (never the shared Redis) and is
killed by its own handle afterwards.
"""

from __future__ import annotations

import subprocess
import time
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import redis
from redis.crc import key_slot

from tests.faults.private_redis import cluster_ports, free_ports, redis_server_bin
from tests.faults.procs import wait_for

SERVICE = "duecast-ha"
# Fast detection, so a test measures duecast's recovery rather than the servers' timeouts: a Sentinel
# calls a master down after 1 s of silence, a cluster node fails its peer after 2 s.
DOWN_AFTER_MS = 1000
NODE_TIMEOUT_MS = 2000


class Servers:
    """redis-server processes a test started, by name; killed by their own handles."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def start(self, name: str, *args: str) -> None:
        with (self.workdir / f"{name}.log").open("ab") as out:
            self.procs[name] = subprocess.Popen(
                [redis_server_bin(), *args],
                cwd=self.workdir,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def kill(self, name: str) -> None:
        proc = self.procs[name]
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)

    def kill_all(self) -> None:
        for name in self.procs:
            self.kill(name)


def answers(port: int, *command: str) -> bool:
    try:
        with redis.Redis(port=port, socket_timeout=2) as client:
            reply = client.execute_command(*command)  # type: ignore[no-untyped-call]
    except redis.RedisError:
        return False
    return bool(reply)


def plain(port: int) -> tuple[str, ...]:
    return (
        *("--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"),
        *("--maxmemory-policy", "noeviction"),
    )


class Sentinel:
    """A master, its replica and three Sentinels (quorum 2) watching them as SERVICE."""

    def __init__(self, servers: Servers) -> None:
        self.servers = servers
        self.master, self.replica, *self.sentinels = free_ports(5)

    def start(self) -> None:
        self.servers.start(f"redis-{self.master}", *plain(self.master))
        wait_for(lambda: answers(self.master, "PING"), 10, "the private master")
        self.servers.start(
            f"redis-{self.replica}", *plain(self.replica), "--replicaof", "127.0.0.1", str(self.master)
        )
        for port in self.sentinels:
            conf = self.servers.workdir / f"sentinel-{port}.conf"
            conf.write_text(
                f"port {port}\nbind 127.0.0.1\ndir {self.servers.workdir}\n"
                f"sentinel monitor {SERVICE} 127.0.0.1 {self.master} 2\n"
                f"sentinel down-after-milliseconds {SERVICE} {DOWN_AFTER_MS}\n"
                f"sentinel failover-timeout {SERVICE} 10000\n"
            )
            self.servers.start(f"sentinel-{port}", str(conf), "--sentinel")
        wait_for(self._ready, 30, "the replica in sync and every Sentinel to know the others")

    def _ready(self) -> bool:
        try:
            with redis.Redis(port=self.replica, socket_timeout=2) as replica:
                if replica.info("replication").get("master_link_status") != "up":
                    return False
            for port in self.sentinels:
                with redis.Redis(port=port, socket_timeout=2) as sentinel:
                    found = sentinel.sentinel_master(SERVICE)  # redis-py parses it into a dict
                    if int(found["num-other-sentinels"]) < 2 or int(found["num-slaves"]) < 1:
                        return False
        except (redis.RedisError, KeyError):
            return False
        return True

    def master_port(self) -> int | None:
        """The master the Sentinels name now (None: they cannot say)."""
        for port in self.sentinels:
            try:
                with redis.Redis(port=port, socket_timeout=2) as sentinel:
                    _host, found = sentinel.execute_command("SENTINEL", "GET-MASTER-ADDR-BY-NAME", SERVICE)  # type: ignore[no-untyped-call]
                    return int(found)
            except (redis.RedisError, TypeError, ValueError):
                continue
        return None

    def env(self) -> dict[str, str]:
        """The duecast settings for this topology (the URL's host is not used with Sentinels)."""
        return {
            "DUECAST_REDIS__URL": "redis://sentinel-managed.invalid:1/0",
            "DUECAST_REDIS__SENTINELS": "[" + ",".join(f'"127.0.0.1:{p}"' for p in self.sentinels) + "]",
            "DUECAST_REDIS__SENTINEL_SERVICE": SERVICE,
        }


class Cluster:
    """Three masters with a replica each: the smallest layout in which a master's loss fails over
    (a majority of masters must agree to promote its replica)."""

    def __init__(self, servers: Servers) -> None:
        self.servers = servers
        self.ports = cluster_ports(6)

    def start(self) -> None:
        for port in self.ports:
            self.servers.start(
                f"redis-{port}",
                *plain(port),
                *("--cluster-enabled", "yes", "--cluster-config-file", f"n{port}.conf"),
                *("--cluster-node-timeout", str(NODE_TIMEOUT_MS)),
            )
        for port in self.ports:
            wait_for(partial(answers, port, "PING"), 10, f"cluster node {port}")
        subprocess.run(
            [
                str(Path(redis_server_bin()).with_name("redis-cli")),
                *("--cluster", "create", *(f"127.0.0.1:{p}" for p in self.ports)),
                *("--cluster-replicas", "1", "--cluster-yes"),
            ],
            check=True,
            capture_output=True,
            timeout=60,
        )
        wait_for(self._ok, 30, "the private cluster to be ok, each replica in sync")

    def _ok(self) -> bool:
        try:
            for port in self.ports:
                with redis.Redis(port=port, socket_timeout=2) as node:
                    if node.cluster("INFO").get("cluster_state") != "ok":
                        return False
                    info = node.info("replication")
                    if info.get("role") == "slave" and info.get("master_link_status") != "up":
                        return False
            return True
        except redis.RedisError:
            return False

    def owner_of(self, hash_tag: str) -> int:
        """The port of the master serving the slot of keys tagged {hash_tag}, as the live nodes say."""
        slot = key_slot(hash_tag.encode())
        for port in self.ports:
            try:
                with redis.Redis(port=port, socket_timeout=2) as node:
                    for start, end, master, *_ in node.cluster("SLOTS"):
                        if int(start) <= slot <= int(end):
                            return int(master[1])
            except redis.RedisError:
                continue
        raise AssertionError(f"no live node serves slot {slot}")

    def env(self) -> dict[str, str]:
        return {
            "DUECAST_REDIS__URL": f"redis://127.0.0.1:{self.ports[0]}/0",
            "DUECAST_REDIS__CLUSTER": "true",
        }

    def masters(self) -> list[int]:
        """The ports of the live nodes that are masters now."""
        found = []
        for port in self.ports:
            try:
                with redis.Redis(port=port, socket_timeout=2) as node:
                    if node.info("replication").get("role") == "master":
                        found.append(port)
            except redis.RedisError:
                continue
        return found

    def reshard(self, hash_tag: str, target: int, *, keys_per_migrate: int, pace_s: float) -> Reshard:
        """Move the slot of keys tagged {hash_tag} to the master at `target`, live, as
        `redis-cli --cluster reshard` moves a slot: the target IMPORTING and the owner MIGRATING it,
        its keys MIGRATEd in batches of `keys_per_migrate` (CLUSTER GETKEYSINSLOT) until none is
        left, then SETSLOT NODE on the target, the old owner and every other master. `pace_s`
        between batches stands for a slot with more keys: the slot stays half moved that long."""
        slot = key_slot(hash_tag.encode())
        source = self.owner_of(hash_tag)
        ids = {port: _node_id(port) for port in self.masters()}
        started = time.monotonic()
        with (
            redis.Redis(port=source, socket_timeout=10) as old,
            redis.Redis(port=target, socket_timeout=10) as new,
        ):
            new.execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", ids[source])  # type: ignore[no-untyped-call]
            old.execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", ids[target])  # type: ignore[no-untyped-call]
            moved = 0
            while keys := old.execute_command("CLUSTER", "GETKEYSINSLOT", slot, keys_per_migrate):  # type: ignore[no-untyped-call]
                old.execute_command("MIGRATE", "127.0.0.1", target, "", 0, 5000, "KEYS", *keys)  # type: ignore[no-untyped-call]
                moved += len(keys)
                time.sleep(pace_s)
        for port in [target, source, *(p for p in ids if p not in (target, source))]:
            with redis.Redis(port=port, socket_timeout=10) as node:
                node.execute_command("CLUSTER", "SETSLOT", slot, "NODE", ids[target])  # type: ignore[no-untyped-call]
        return Reshard(slot, source, target, moved, time.monotonic() - started)


@dataclass(frozen=True)
class Reshard:
    slot: int
    source: int  # the port of the master that served the slot
    target: int  # ...and of the one that serves it now
    keys: int  # keys MIGRATEd
    took_s: float  # from IMPORTING to the last SETSLOT NODE


def _node_id(port: int) -> str:
    with redis.Redis(port=port, socket_timeout=2) as node:
        found = node.execute_command("CLUSTER", "MYID")  # type: ignore[no-untyped-call]
    return found.decode() if isinstance(found, bytes) else str(found)
