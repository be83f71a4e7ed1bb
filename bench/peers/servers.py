"""The benchmark's own servers: a private redis-server on a free port, and its own MariaDB database.

The shared Redis is never used (the peers do not namespace their keys), and only the
duecast_bench_peers database is created, emptied and dropped; nothing else on the servers is touched.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import redis

from duecast.shared.identifiers import quote
from duecast.shared.settings import MySQLSettings
from duecast.shared.storage.db import connect


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PrivateRedis:
    """A redis-server child with no persistence; `flush()` empties it between systems."""

    def __init__(self, binary: str = "redis-server") -> None:
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self._dir = Path(tempfile.mkdtemp(prefix="duecast-peers-redis-"))
        self._proc = subprocess.Popen(
            [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
             "--dir", str(self._dir), "--maxmemory-policy", "noeviction"],
            stdout=(self._dir / "redis.log").open("wb"),
            stderr=subprocess.STDOUT,
        )  # fmt: skip
        self.client = redis.Redis.from_url(self.url)
        deadline = time.monotonic() + 10
        while True:
            try:
                self.client.ping()
                break
            except redis.ConnectionError:
                if time.monotonic() > deadline or self._proc.poll() is not None:
                    self.stop()
                    raise RuntimeError(f"private redis-server did not start (log: {self._dir})") from None
                time.sleep(0.05)

    def flush(self) -> None:
        self.client.flushall()  # our private server only

    def version(self) -> str:
        return str(self.client.info("server")["redis_version"])

    def stop(self) -> None:
        self.client.close()
        if self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        shutil.rmtree(self._dir, ignore_errors=True)


def create_database(mysql: MySQLSettings) -> str:
    """Create the benchmark's database (empty); returns the server's VERSION()."""
    conn = connect(mysql, database=False)
    try:
        with conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS {quote(mysql.database)}")
            cur.execute(f"CREATE DATABASE {quote(mysql.database)} CHARACTER SET utf8mb4")
            cur.execute("SELECT VERSION()")
            (version,) = cur.fetchone() or ("?",)
        return str(version)
    finally:
        conn.close()


def drop_database(mysql: MySQLSettings) -> None:
    conn = connect(mysql, database=False)
    try:
        with conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS {quote(mysql.database)}")
    finally:
        conn.close()
