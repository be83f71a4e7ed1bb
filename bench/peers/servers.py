"""The benchmark's own servers: a private redis-server on a free port, and its own MariaDB database;
and the facts a result records about them and the machine.

The shared Redis is never used (the peers do not namespace their keys), and only the
duecast_bench_peers database is created, emptied and dropped; nothing else on the servers is touched.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import socket
import subprocess
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

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


# The packages whose versions a result records (those a peer venv lacks are left out).
PEER_PACKAGES = (
    "celery",
    "kombu",
    "gevent",
    "rq",
    "dramatiq",
    "arq",
    "redis",
    "hiredis",
    "PyMySQL",
    "matplotlib",
)
PRODUCT_DIRS = ("shared", "dispatcher", "worker", "duecast")  # duecast's code, for "uncommitted changes"


def peer_versions(python: Path) -> dict[str, str]:
    """PEER_PACKAGES' versions as installed for `python` (a peer venv's interpreter)."""
    script = (
        "import json; from importlib import metadata as m\n"
        "def v(p):\n"
        "    try: return m.version(p)\n"
        "    except m.PackageNotFoundError: return None\n"
        f"print(json.dumps({{p: v(p) for p in {PEER_PACKAGES!r}}}))"
    )
    found = subprocess.run([str(python), "-c", script], capture_output=True, text=True, check=True)
    return {p: v for p, v in json.loads(found.stdout).items() if v}


def machine_facts(pythons: set[Path], mariadb: str, redis_v: str, root: Path) -> dict[str, Any]:
    """Date, CPU, server and package versions, and the duecast commit measured (from `root`)."""
    cpu = next(
        (line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
         if line.startswith("model name")),
        platform.processor(),
    )  # fmt: skip
    commit = _git(root, "rev-parse", "--short", "HEAD").strip() or "?"
    # Others edit the product while this runs: say whether the measured code was the commit's.
    changed = _git(root, "status", "--porcelain", "--", *PRODUCT_DIRS).splitlines()
    return {
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "nproc": os.cpu_count(),
        "cpu": cpu,
        "mariadb": mariadb,
        "redis": redis_v,
        "python": platform.python_version(),
        "duecast_tree": f"{commit}" + (f" + uncommitted changes in {len(changed)} files" if changed else ""),
        "peers": {python.parent.parent.name: peer_versions(python) for python in sorted(pythons)},
        "loadavg_at_start": os.getloadavg(),
    }


def _git(root: Path, *args: str) -> str:
    """Read-only git queries (never anything that changes the index or the working tree)."""
    return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, check=False).stdout
