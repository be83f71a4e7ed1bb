"""A throwaway MariaDB server for the chaos suite's restart scenario: its own data dir and free port,
killed (SIGKILL: a crash, InnoDB recovers on start) and started again on the same data."""

from __future__ import annotations

import random
import shutil
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pymysql

from duecast.shared.settings import MySQLSettings
from tests.faults.private_redis import free_port
from tests.faults.procs import wait_for


def _binary(*names: str) -> str:
    for name in names:
        for folder in ("", "/usr/sbin/", "/usr/bin/", "/usr/local/sbin/", "/usr/local/bin/"):
            found = shutil.which(folder + name) if folder else shutil.which(name)
            if found:
                return found
    raise FileNotFoundError(
        f"none of {', '.join(names)} is installed (Debian: apt-get install mariadb-server)"
    )


class PrivateMariaDB:
    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.data = workdir / "mariadb-data"
        self.tmp = workdir / "mariadb-tmp"
        self.port = free_port()
        self.log = workdir / f"mariadb-{self.port}.log"
        self.popen: subprocess.Popen[bytes] | None = None

    def settings(self, database: str) -> MySQLSettings:
        return MySQLSettings(host="127.0.0.1", port=self.port, user="root", database=database)

    def start(self) -> None:
        as_root = ["--user=root"]  # mariadbd refuses to run as root without it; harmless otherwise
        # Its own tmpdir: mariadbd (and its bootstrap) deletes every #sql* file in its tmpdir as it
        # starts, and /tmp holds the shared server's internal temporary tables (a worker's query on
        # it failed, "Error on delete of '/tmp/#sql-temptable-...MAI'", when this one started beside it).
        self.tmp.mkdir(exist_ok=True)
        if not self.data.exists():
            self._install()
        with self.log.open("ab") as out:
            self.popen = subprocess.Popen(
                [
                    _binary("mariadbd", "mysqld"),
                    "--no-defaults",
                    *as_root,
                    f"--datadir={self.data}",
                    f"--tmpdir={self.tmp}",
                    "--bind-address=127.0.0.1",
                    f"--port={self.port}",
                    f"--socket={self.workdir / 'mariadb.sock'}",
                    "--innodb-buffer-pool-size=64M",
                    "--character-set-server=utf8mb4",
                    "--max-connections=200",
                ],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        wait_for(self._answers, 60, f"the private MariaDB on port {self.port} to answer")

    def _install(self) -> None:
        """mariadb-install-db into a fresh data dir. Tried up to 3 times: two of them bootstrapping at
        the same moment (the fault tier runs 2 tests at a time) failed once in a clean-clone run,
        exit 1; its output goes to the server's log, and the last failure is raised."""
        for attempt in range(3):
            shutil.rmtree(self.data, ignore_errors=True)
            with self.log.open("ab") as out:
                done = subprocess.run(
                    [
                        _binary("mariadb-install-db", "mysql_install_db"),
                        "--no-defaults",
                        f"--datadir={self.data}",
                        f"--tmpdir={self.tmp}",
                        "--user=root",  # mariadbd refuses to run as root without it
                        "--auth-root-authentication-method=normal",
                        "--skip-test-db",
                    ],
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    check=False,
                    timeout=120,
                )
            if done.returncode == 0:
                return
            if attempt == 2:
                done.check_returncode()
            time.sleep(1.0 + random.random())  # out of step with the other bootstrap

    def _answers(self) -> bool:
        if self.popen is not None and self.popen.poll() is not None:
            raise AssertionError(f"private mariadbd exited with {self.popen.returncode}; see {self.log}")
        try:
            pymysql.connect(host="127.0.0.1", port=self.port, user="root", connect_timeout=1).close()
        except pymysql.err.OperationalError:
            return False
        return True

    def kill(self) -> None:
        """SIGKILL: a crash. Every client connection breaks; committed data survives."""
        if self.popen is not None and self.popen.poll() is None:
            self.popen.kill()
            self.popen.wait(30)

    def restart(self) -> None:
        self.kill()
        self.start()


@contextmanager
def running_with(workdir: Path, database: str) -> Iterator[PrivateMariaDB]:
    """A private MariaDB started in `workdir` with an empty `database`, killed when the block ends."""
    db = PrivateMariaDB(workdir)
    db.start()
    root = pymysql.connect(host="127.0.0.1", port=db.port, user="root", autocommit=True)
    with root.cursor() as cur:
        cur.execute(f"CREATE DATABASE `{database}`")
    root.close()
    try:
        yield db
    finally:
        db.kill()
