"""Throwaway TLS servers for test_tls.py and test_tls_mysql.py: an openssl CA, a redis-server, a MariaDB.

Everything lives in one temporary directory and on free ports; each server is a child process that
the fixture stops. The shared servers are never touched. Certificates use EC P-256 keys (fast).
"""

from __future__ import annotations

import os
import secrets
import shutil
import socket
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pymysql
import redis

from tests.integration.polling import wait_until

CERT_DAYS = "2"
NO_ROOT_PASSWORD = ["--auth-root-authentication-method=normal"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


@dataclass(frozen=True)
class Pki:
    """A CA, a server certificate for IP 127.0.0.1 only (so "localhost" fails the name check),
    a client certificate, and a second CA that signed nothing of ours (the wrong CA)."""

    ca: Path
    other_ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path


def make_pki(workdir: Path) -> Pki:
    if shutil.which("openssl") is None:
        raise AssertionError("the TLS tests need the openssl command to make their throwaway CA")
    ec = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")
    for name in ("ca", "other_ca"):
        _openssl(
            *("req", "-x509", *ec, "-keyout", f"{name}.key", "-out", f"{name}.pem", "-days", CERT_DAYS),
            *("-subj", f"/CN=duecast test {name}"),
            *("-addext", "basicConstraints=critical,CA:TRUE"),
            *("-addext", "keyUsage=critical,keyCertSign,cRLSign"),
            cwd=workdir,
        )
    leaves = {"server": ("IP:127.0.0.1", "serverAuth"), "client": ("DNS:duecast-client", "clientAuth")}
    for name, (san, usage) in leaves.items():
        (workdir / f"{name}.ext").write_text(
            f"subjectAltName={san}\nbasicConstraints=critical,CA:FALSE\n"
            f"keyUsage=critical,digitalSignature\nextendedKeyUsage={usage}\n"
            "authorityKeyIdentifier=keyid\nsubjectKeyIdentifier=hash\n"
        )
        _openssl(
            *("req", "-new", *ec, "-keyout", f"{name}.key", "-out", f"{name}.csr"),
            *("-subj", f"/CN=duecast test {name}"),
            cwd=workdir,
        )
        _openssl(
            *("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key"),
            *("-CAcreateserial", "-out", f"{name}.pem", "-days", CERT_DAYS, "-extfile", f"{name}.ext"),
            cwd=workdir,
        )
    for key in workdir.glob("*.key"):
        key.chmod(0o600)  # the servers refuse world-readable keys in some builds
    return Pki(
        ca=workdir / "ca.pem",
        other_ca=workdir / "other_ca.pem",
        server_cert=workdir / "server.pem",
        server_key=workdir / "server.key",
        client_cert=workdir / "client.pem",
        client_key=workdir / "client.key",
    )


class NoTLS(Exception):
    """The server binary was built without TLS: the caller skips, saying so."""


class TLSRedis:
    """redis-server with only a TLS port, client certificates required, and one ACL user
    (`default` is off, so a client without credentials gets NOAUTH)."""

    USER = "duecast"

    def __init__(self, workdir: Path, pki: Pki) -> None:
        self.workdir = workdir
        self.pki = pki
        self.port = free_port()
        self.password = secrets.token_hex(16)
        self.log = workdir / "redis.log"
        self.popen: subprocess.Popen[bytes] | None = None

    def url(self, host: str = "127.0.0.1", user: str = USER, password: str | None = None) -> str:
        auth = f"{user}:{self.password if password is None else password}@" if user else ""
        return f"rediss://{auth}{host}:{self.port}/0"

    def start(self) -> None:
        binary = os.environ.get("DUECAST_REDIS_SERVER_BIN") or shutil.which("redis-server")
        if not binary:
            raise AssertionError("no redis-server binary; run the tests with `scripts/dev test`")
        p = self.pki
        args = [
            binary,
            *("--port", "0", "--tls-port", str(self.port), "--bind", "127.0.0.1"),
            *("--tls-cert-file", str(p.server_cert), "--tls-key-file", str(p.server_key)),
            *("--tls-ca-cert-file", str(p.ca), "--tls-auth-clients", "yes"),
            *("--save", "", "--appendonly", "no", "--dir", str(self.workdir)),
            *("--user", "default", "off"),
            *("--user", self.USER, "on", f">{self.password}", "~*", "&*", "+@all"),
        ]
        with self.log.open("ab") as out:
            self.popen = subprocess.Popen(
                args, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )
        wait_until(self._answers, "the private TLS redis-server to answer", 15)

    def _answers(self) -> bool:
        if self.popen is not None and self.popen.poll() is not None:
            text = self.log.read_text(errors="replace")
            if "tls" in text.lower() and ("bad directive" in text.lower() or "not supported" in text.lower()):
                raise NoTLS(f"redis-server was built without TLS support: {text.strip()[-300:]}")
            raise AssertionError(f"private redis-server exited with {self.popen.returncode}:\n{text}")
        client = redis.Redis(
            host="127.0.0.1",
            port=self.port,
            username=self.USER,
            password=self.password,
            ssl=True,
            ssl_ca_certs=str(self.pki.ca),
            ssl_certfile=str(self.pki.client_cert),
            ssl_keyfile=str(self.pki.client_key),
            socket_timeout=2,
        )
        try:
            return bool(client.ping())
        except redis.RedisError:
            return False
        finally:
            client.close()

    def stop(self) -> None:
        if self.popen is not None and self.popen.poll() is None:
            self.popen.terminate()
            self.popen.wait(15)


class TLSMariaDB:
    """A private mariadbd with TLS on (ssl-ca/cert/key), its own data dir, socket and port."""

    def __init__(self, workdir: Path, pki: Pki) -> None:
        # A short directory of its own: a Unix socket path must stay under 108 bytes.
        self.dir = Path(tempfile.mkdtemp(prefix="dcsec-db-"))
        self.workdir = workdir
        self.pki = pki
        self.port = free_port()
        self.log = self.dir / "error.log"
        self.popen: subprocess.Popen[bytes] | None = None

    @staticmethod
    def binaries() -> tuple[str, str] | None:
        path = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/usr/local/sbin", "/usr/libexec"])
        server = shutil.which("mariadbd", path=path) or shutil.which("mysqld", path=path)
        install = shutil.which("mariadb-install-db", path=path) or shutil.which("mysql_install_db", path=path)
        return (server, install) if server and install else None

    def start(self) -> None:
        found = self.binaries()
        assert found is not None
        server, install = found
        as_root = ["--user=root"] if os.geteuid() == 0 else []  # mariadbd refuses root otherwise
        data = self.dir / "data"
        tmp = self.dir / "tmp"  # its own: mariadbd deletes every #sql* file in its tmpdir as it starts
        tmp.mkdir(exist_ok=True)
        # Root with no password: the server listens on 127.0.0.1 only and lives for one test module.
        subprocess.run(
            [
                install,
                "--no-defaults",
                f"--datadir={data}",
                f"--tmpdir={tmp}",
                *as_root,
                "--skip-test-db",
                *NO_ROOT_PASSWORD,
            ],
            check=True,
            capture_output=True,
            timeout=120,
        )
        p = self.pki
        args = [
            server,
            "--no-defaults",
            *as_root,
            f"--datadir={data}",
            f"--tmpdir={tmp}",
            "--bind-address=127.0.0.1",
            f"--port={self.port}",
            f"--socket={self.dir / 'sock'}",
            f"--pid-file={self.dir / 'pid'}",
            f"--log-error={self.log}",
            "--innodb-buffer-pool-size=16M",
            "--skip-log-bin",
            f"--ssl-ca={p.ca}",
            f"--ssl-cert={p.server_cert}",
            f"--ssl-key={p.server_key}",
        ]
        self.popen = subprocess.Popen(
            args,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        wait_until(self._answers, "the private TLS MariaDB to answer", 60)

    def _answers(self) -> bool:
        if self.popen is not None and self.popen.poll() is not None:
            raise AssertionError(f"private mariadbd exited:\n{self.log.read_text(errors='replace')[-2000:]}")
        try:
            self.root().close()
        except pymysql.err.OperationalError:
            return False
        return True

    def root(self) -> pymysql.Connection[pymysql.cursors.Cursor]:
        """A plain (PyMySQL-default) root connection for arranging users."""
        return pymysql.connect(host="127.0.0.1", port=self.port, user="root", password="", autocommit=True)

    def stop(self) -> None:
        if self.popen is not None and self.popen.poll() is None:
            self.popen.terminate()  # mariadbd shuts down cleanly on SIGTERM
            try:
                self.popen.wait(60)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(10)
        shutil.rmtree(self.dir, ignore_errors=True)
