"""The chaos harness's Redis as a Sentinel-managed master, its replica and three Sentinels (the
topology of tests/faults/redis_ha.py), for a scenario that fails the master over while jobs flow.
It stands where a PrivateRedis does: `client` follows the master the Sentinels name.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import redis
from redis.sentinel import Sentinel as SentinelClient

from tests.faults.private_redis import PrivateRedis
from tests.faults.procs import wait_for
from tests.faults.redis_ha import SERVICE, Sentinel, Servers


class SentinelRedis(PrivateRedis):
    """Started with `start()`, failed over with `failover()`, its master killed with `kill_master()`;
    every server stopped with `kill()`."""

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
        raise NotImplementedError("a Sentinel topology fails over; it is not restarted in place")

    def failover(self, timeout_s: float = 30.0) -> None:
        """SENTINEL FAILOVER, until the Sentinels name the other server and it takes writes."""
        before = self.topology.master_port()
        with redis.Redis(port=self.topology.sentinels[0], socket_timeout=5) as sentinel:
            # Right after the last failover the Sentinels may not yet count the old master, now a
            # replica, as a good one (NOGOODSLAVE): asked again until they do.
            wait_for(lambda: self._failover_asked(sentinel), timeout_s, "a replica fit to promote")
        wait_for(lambda: self._master_moved(before), timeout_s, "the Sentinels to switch masters")

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

    def _master_moved(self, before: int | None) -> bool:
        now = self.topology.master_port()
        if now is None or now == before:
            return False
        try:
            with redis.Redis(port=now, socket_timeout=2) as master:
                return bool(master.info("replication").get("role") == "master")
        except redis.RedisError:
            return False
