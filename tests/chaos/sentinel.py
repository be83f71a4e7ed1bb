"""The chaos harness's Redis as a Sentinel-managed master, its replica and three Sentinels (the
topology of tests/faults/redis_ha.py), for the scenarios that fail the master over while work flows
(the soak among them). It stands where a PrivateRedis does: `client` follows the master the Sentinels
name, and `restart()` restarts that master in place, empty, as a PrivateRedis restarts.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import redis
from redis.sentinel import Sentinel as SentinelClient

from tests.faults.private_redis import PrivateRedis
from tests.faults.procs import wait_for
from tests.faults.redis_ha import SERVICE, Sentinel, Servers, answers, plain


class SentinelRedis(PrivateRedis):
    """Started with `start()`, failed over with `failover()`, its master killed with `kill_master()`
    or restarted in place with `restart()`; every server stopped with `kill()`."""

    def __init__(self, workdir: Path) -> None:
        super().__init__(workdir)
        self.servers = Servers(workdir)
        self.topology = Sentinel(self.servers)

    @property
    def url(self) -> str:
        return self.topology.env()["DUECAST_REDIS__URL"]

    def settings_fields(self) -> dict[str, Any]:
        sentinels = [f"127.0.0.1:{p}" for p in self.topology.sentinels]
        return {"url": self.url, "sentinels": sentinels, "sentinel_service": SERVICE}

    def env(self) -> dict[str, str]:
        return self.topology.env()

    def start(self) -> None:
        self.topology.start()
        sentinels = SentinelClient([("127.0.0.1", p) for p in self.topology.sentinels], socket_timeout=2)
        self.client = sentinels.master_for(SERVICE, socket_timeout=5)

    def kill(self) -> None:
        self.servers.kill_all()

    def restart(self) -> None:
        """The master SIGKILLed and started again at once on its port, with no persistence: every
        connection breaks and all data is gone, as when a PrivateRedis restarts (the replica syncs
        the empty data set from it). It answers again well within the Sentinels' down-after (1 s),
        so they do not fail over; if a loaded machine makes it slower, they may, and the restarted
        server is made a replica of the promoted one: a failover, which duecast must ride out too.
        Returns once every Sentinel has heard from the master it names since the kill."""
        port = self.topology.master_port()
        assert port is not None, "the Sentinels name no master"
        name, killed = f"redis-{port}", time.monotonic()
        self.servers.kill(name)
        self.servers.start(name, *plain(port))
        wait_for(lambda: answers(port, "PING"), 10, f"the restarted master on port {port}")
        self.client.connection_pool.disconnect()
        self._settle(killed)
        if (now := self.topology.master_port()) != port:
            print(f"  the Sentinels failed the restarted master over: port {port} -> {now}")

    def failover(self, timeout_s: float = 30.0) -> None:
        """SENTINEL FAILOVER, until the Sentinels name the other server and it takes writes."""
        before = self.topology.master_port()
        with redis.Redis(port=self.topology.sentinels[0], socket_timeout=5) as sentinel:
            # Right after the last failover the Sentinels may not yet count the old master, now a
            # replica, as a good one (NOGOODSLAVE): asked again until they do.
            wait_for(lambda: self._failover_asked(sentinel), timeout_s, "a replica fit to promote")
        wait_for(lambda: self._master_moved(before), timeout_s, "the Sentinels to switch masters")
        # The old master takes writes until the Sentinels demote it: the harness' own commands (a
        # FLUSHALL, a SET, reading holds) go to the new one from now on.
        self.client.connection_pool.disconnect()
        self._settle(time.monotonic())

    @staticmethod
    def _failover_asked(sentinel: redis.Redis) -> bool:
        try:
            sentinel.execute_command("SENTINEL", "FAILOVER", SERVICE)  # type: ignore[no-untyped-call]
        except redis.ResponseError as exc:
            if "NOGOODSLAVE" in str(exc) or "INPROG" in str(exc):
                return False
            raise
        return True

    def kill_master(self, timeout_s: float = 30.0) -> None:
        """SIGKILL the master, until the Sentinels have promoted the replica."""
        before = self.topology.master_port()
        self.servers.kill(f"redis-{before}")
        wait_for(lambda: self._master_moved(before), timeout_s, "the Sentinels to promote the replica")
        self.client.connection_pool.disconnect()
        self._settle(time.monotonic())

    def _settle(self, since: float, timeout_s: float = 30.0) -> None:
        """Until every Sentinel names one master that takes writes, flags it neither down nor failing
        over, and has had a ping reply from it since `since` (monotonic). A Sentinel reconnects to a
        restarted server only once a second: until then it may flag it down (redis-py then finds no
        master, for the harness' own calls as for duecast's), though it answers."""
        wait_for(lambda: self._settled(since), timeout_s, "every Sentinel to see a healthy master")

    def _settled(self, since: float) -> bool:
        heard_within_ms = (time.monotonic() - since) * 1000
        ports = set()
        for port in self.topology.sentinels:
            try:
                with redis.Redis(port=port, socket_timeout=2) as sentinel:
                    state = sentinel.sentinel_master(SERVICE)
            except redis.RedisError:
                return False
            flags = set(str(state["flags"]).split(","))
            if flags & {"s_down", "o_down", "disconnected", "failover_in_progress"}:
                return False
            if int(state["last-ok-ping-reply"]) >= heard_within_ms:
                return False
            ports.add(int(state["port"]))
        return len(ports) == 1 and self._takes_writes(ports.pop())

    def _master_moved(self, before: int | None) -> bool:
        now = self.topology.master_port()
        return now is not None and now != before and self._takes_writes(now)

    @staticmethod
    def _takes_writes(port: int | None) -> bool:
        if port is None:
            return False
        try:
            with redis.Redis(port=port, socket_timeout=2) as master:
                return bool(master.info("replication").get("role") == "master")
        except redis.RedisError:
            return False
