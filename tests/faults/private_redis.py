"""A throwaway redis-server per test, for the faults the shared server must never see (FLUSHALL, kill).

No persistence (`--save "" --appendonly no`), bound to 127.0.0.1 on a free port, not daemonized:
the test owns the process, kills it with SIGKILL and may start it again on the same port.
"""

from __future__ import annotations

import os
import random
import shutil
import socket
import subprocess
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import redis

from tests.faults.procs import wait_for


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def free_ports(n: int) -> list[int]:
    """`n` different free ports: every socket stays bound until all are found.
    Calls of free_port() one after another can return the same port twice (the kernel hands a freed
    ephemeral port out again), and two servers of one topology on one port leave one not started."""
    with ExitStack() as held:
        ports: list[int] = []
        while len(ports) < n:
            s = held.enter_context(socket.socket())
            s.bind(("127.0.0.1", 0))
            ports.append(int(s.getsockname()[1]))
        return ports


CLUSTER_BUS_OFFSET = 10_000  # a Redis Cluster node listens on its port + 10000 too (the cluster bus)
# Below the kernel's ephemeral ports (ip_local_port_range: 32768 up by default), bus ports included:
# no outgoing connection elsewhere in the suite is given one between the check here and redis-server's
# bind. A port found free by binding port 0 is an ephemeral one, and its bus port was never checked:
# a clean-clone run's cluster node never answered, its port or bus port taken meanwhile.
CLUSTER_PORTS = range(20_000, 32_768 - CLUSTER_BUS_OFFSET)


def cluster_ports(n: int) -> list[int]:
    """`n` different ports from CLUSTER_PORTS, each free with its bus port; every socket stays bound
    until all are found."""
    with ExitStack() as held:
        ports: list[int] = []
        for port in random.sample(CLUSTER_PORTS, len(CLUSTER_PORTS)):
            if len(ports) == n:
                break
            try:
                pair = [held.enter_context(socket.socket()) for _ in range(2)]
                pair[0].bind(("127.0.0.1", port))
                pair[1].bind(("127.0.0.1", port + CLUSTER_BUS_OFFSET))
            except OSError:
                continue  # in use: the next one
            ports.append(port)
        if len(ports) < n:
            raise AssertionError(f"only {len(ports)} of {n} cluster ports free in {CLUSTER_PORTS}")
        return ports


def redis_server_bin() -> str:
    found = os.environ.get("DUECAST_REDIS_SERVER_BIN") or shutil.which("redis-server")
    if not found:
        raise AssertionError(
            "no redis-server for the private Redis of the fault tests; run them with `scripts/dev test` "
            "(it exports DUECAST_REDIS_SERVER_BIN) or install redis-server"
        )
    return found


class PrivateRedis:
    def __init__(self, workdir: Path, password: str | None = None) -> None:
        self.workdir = workdir
        self.port = free_port()
        self.password = password  # requirepass, for tests of a wrong password
        self.log = workdir / f"redis-{self.port}.log"
        self.popen: subprocess.Popen[bytes] | None = None
        self.client = redis.Redis(host="127.0.0.1", port=self.port, password=password, socket_timeout=5)

    @property
    def url(self) -> str:
        auth = f":{self.password}@" if self.password else ""
        return f"redis://{auth}127.0.0.1:{self.port}/0"

    def settings_fields(self) -> dict[str, Any]:
        """The RedisSettings fields that reach this server (a Sentinel topology adds its own)."""
        return {"url": self.url}

    def env(self) -> dict[str, str]:
        """The same, as the DUECAST_* variables of a child process."""
        return {"DUECAST_REDIS__URL": self.url}

    def start(self) -> None:
        with self.log.open("ab") as out:
            self.popen = subprocess.Popen(
                [
                    redis_server_bin(),
                    *("--port", str(self.port), "--bind", "127.0.0.1"),
                    *("--save", "", "--appendonly", "no", "--dir", str(self.workdir)),
                    *(("--requirepass", self.password) if self.password else ()),
                ],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        wait_for(self._answers, 10, f"the private redis-server on port {self.port} to answer")

    def _answers(self) -> bool:
        if self.popen is not None and self.popen.poll() is not None:
            raise AssertionError(f"private redis-server exited with {self.popen.returncode}; see {self.log}")
        try:
            return bool(self.client.ping())
        except redis.RedisError:
            return False

    def kill(self) -> None:
        """SIGKILL: everything in it is gone, every client connection breaks."""
        if self.popen is not None and self.popen.poll() is None:
            self.popen.kill()
            self.popen.wait(10)
        self.client.connection_pool.disconnect()

    def restart(self) -> None:
        self.kill()
        self.start()
