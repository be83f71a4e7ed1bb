"""The servers: MySQL (connection, timeouts, TLS) and Redis (URL, key prefix, topology, TLS)."""

from __future__ import annotations

from pathlib import Path
from typing import Self

from pydantic import Field, SecretStr, model_validator

from .base import Identifier, _Section


class MySQLSettings(_Section):
    host: str = "127.0.0.1"
    port: int = Field(3306, ge=1, le=65535)
    user: str = "root"
    password: SecretStr = SecretStr("")
    database: Identifier = "duecast"
    unix_socket: str | None = None
    # Connecting, the handshake and the session set-up (each read): a server that accepts TCP and
    # never answers holds a role this long, then the error names its host:port.
    connect_timeout_s: float = Field(5.0, gt=0, le=60)
    read_timeout_s: float = Field(30.0, gt=0, le=3600)  # each statement's reads and writes, once connected
    lock_wait_s: int = Field(2, ge=1, le=60)  # innodb_lock_wait_timeout for duecast's sessions
    # Connect and read timeout of the lease keepers' own connections (jobs, topic messages, the
    # rows and spans of sources): a renewal that stalls is cut off and tried again on a new
    # connection, well inside the lease (every lease_s must exceed about 4.3 times this; see
    # docs/reliability.md). Never waits for locks.
    lease_keeper_timeout_s: float = Field(2.0, gt=0, le=60)
    # How long an Enqueuer or Publisher keeps retrying a write of its own (not one joining the
    # caller's transaction) that failed for a reason that passes before its COMMIT was sent: the
    # server down or restarting (a MariaDB restart or failover takes tens of seconds), a deadlock, a
    # lock wait timeout. The call blocks meanwhile. A failure at the COMMIT is never retried (it may
    # have landed). 0: one try.
    writer_retry_s: float = Field(30.0, ge=0, le=600)
    # TLS (docs/security.md). `tls = true` requires it: a server without TLS is refused, never
    # used in plaintext. The server's certificate is checked against tls_ca_file (default: the
    # system's CAs) and its name against `host`.
    tls: bool = False
    tls_ca_file: Path | None = None
    tls_cert_file: Path | None = None  # client certificate, for accounts that REQUIRE X509
    tls_key_file: Path | None = None  # its private key, unless tls_cert_file holds both
    tls_verify: bool = True  # false: encrypted but unauthenticated (logged as a warning)
    tls_check_hostname: bool = True  # false: any certificate tls_ca_file signed (VERIFY_CA)

    @model_validator(mode="after")
    def _coherent(self) -> Self:
        if self.read_timeout_s <= self.lock_wait_s:
            raise ValueError(
                f"mysql.read_timeout_s ({self.read_timeout_s}) must be longer than mysql.lock_wait_s "
                f"({self.lock_wait_s}), or a statement waiting for a row lock would be cut off as if "
                "the server were dead"
            )
        files = (self.tls_ca_file, self.tls_cert_file, self.tls_key_file)
        if not self.tls and any(files):
            raise ValueError("mysql.tls_* files are set but mysql.tls is false; set mysql.tls = true")
        self.check_tls_files("mysql", *files)
        return self

    @staticmethod
    def check_tls_files(section: str, ca: Path | None, cert: Path | None, key: Path | None) -> None:
        """Refuse at start-up what would fail at the first connection (paths are not secrets)."""
        for name, path in (("tls_ca_file", ca), ("tls_cert_file", cert), ("tls_key_file", key)):
            if path is not None and not path.is_file():
                raise ValueError(f"{section}.{name}: no such file: {path}")
        if key is not None and cert is None:
            raise ValueError(f"{section}.tls_key_file is set without {section}.tls_cert_file")


class RedisSettings(_Section):
    # redis://[user:password@]host:port/db, rediss://... for TLS, or unix:///path?db=0. It may
    # carry an ACL user and password: errors about it never quote it. No other ?options: one
    # there would override these settings (e.g. ssl_cert_reqs=none).
    url: SecretStr = SecretStr("redis://127.0.0.1:6379/0")
    key_prefix: str = Field("duecast", pattern=r"^[A-Za-z0-9_.:-]{1,64}$")
    socket_timeout_s: float = Field(5.0, gt=0, le=60)
    # TLS, for rediss:// URLs (docs/security.md): the server's certificate is checked against
    # tls_ca_file (default: the system's CAs) and its name against the URL's host.
    tls_ca_file: Path | None = None
    tls_cert_file: Path | None = None  # client certificate, when the server has tls-auth-clients on
    tls_key_file: Path | None = None  # its private key, unless tls_cert_file holds both
    tls_verify: bool = True  # false: encrypted but unauthenticated (logged as a warning)
    tls_check_hostname: bool = True  # false: any certificate tls_ca_file signed
    # High availability (deploy/README.md): either Sentinels ("host:port" each) that know the master
    # named sentinel_service, the url then giving only user, password, db and redis:// or rediss://
    # (asked again at most once a second: the roles follow a failover within about a second);
    # or cluster = true, the url naming any one node (database 0 only).
    sentinels: list[str] = Field(default_factory=list, max_length=16)
    sentinel_service: str | None = Field(None, pattern=r"^[A-Za-z0-9_.-]{1,64}$")
    cluster: bool = False

    @property
    def tls(self) -> bool:
        return self.url.get_secret_value().startswith("rediss://")

    def sentinel_addresses(self) -> list[tuple[str, int]]:
        """The Sentinels as (host, port), already checked by the validator."""
        return [(host, int(port)) for host, _, port in (s.rpartition(":") for s in self.sentinels)]

    @model_validator(mode="after")
    def _coherent(self) -> Self:
        problem = self._url_problem(self.url.get_secret_value())
        if problem is not None:  # raised outside any except: no chained error can quote the URL
            raise ValueError(f"redis.url {problem} (the URL is not shown: it may hold a password)")
        files = (self.tls_ca_file, self.tls_cert_file, self.tls_key_file)
        if not self.tls and any(files):
            raise ValueError("redis.tls_* files are set but redis.url is not rediss://")
        MySQLSettings.check_tls_files("redis", *files)
        problem = self._topology_problem()
        if problem is not None:
            raise ValueError(problem)
        return self

    def _topology_problem(self) -> str | None:
        """What is wrong with the sentinel / cluster settings (none of them is secret)."""
        if bool(self.sentinels) != (self.sentinel_service is not None):
            return "redis.sentinels and redis.sentinel_service must be set together"
        if self.sentinels and self.cluster:
            return "redis.sentinels and redis.cluster = true exclude each other"
        if (self.sentinels or self.cluster) and self.url.get_secret_value().startswith("unix://"):
            return "redis.sentinels and redis.cluster need a redis:// or rediss:// url"
        for address in self.sentinels:
            host, _, port = address.rpartition(":")
            if not host or not (port.isascii() and port.isdigit() and 0 < int(port) < 65536):
                return f"redis.sentinels entry {address!r} is not host:port"
        from urllib.parse import urlsplit  # noqa: PLC0415 - as in _url_problem, which checked it parses

        if self.cluster and urlsplit(self.url.get_secret_value()).path.strip("/") not in {"", "0"}:
            return "redis.cluster = true needs database 0 (Redis Cluster has no other)"
        return None

    @staticmethod
    def _url_problem(url: str) -> str | None:
        """What is wrong with `url`, in words that never contain any part of it."""
        from urllib.parse import parse_qs, urlsplit  # noqa: PLC0415 - only this check parses URLs

        scheme, sep, _ = url.partition("://")
        if not sep or scheme not in {"redis", "rediss", "unix"}:
            return "must start with redis://, rediss:// or unix://"
        try:
            parts = urlsplit(url)
            query = parse_qs(parts.query, keep_blank_values=True, strict_parsing=bool(parts.query))
            bad = parts.port == -1  # reading .port parses it: a stray / ? # in a password fails here
        except ValueError:
            bad = True
        if bad:
            return "is not a valid URL: check the port, and percent-encode / ? # @ : in a password"
        if parts.fragment or set(query) - {"db"}:
            return "may carry no #fragment and no ?option but db: use the [redis] settings"
        if scheme != "unix" and not parts.hostname:
            return "names no host"
        # redis-py silently uses database 0 when it cannot read the number.
        db = query["db"][0] if "db" in query else "" if scheme == "unix" else parts.path.strip("/")
        if db and not (db.isascii() and db.isdigit()):
            return "names no valid database number (redis://host:6379/0)"
        return None
