"""TLS with certificate verification, against private redis-server and MariaDB made for this module.

A throwaway CA (openssl) signs the servers' certificate (for IP 127.0.0.1 only) and a client one.
Verified connections work; a wrong CA, the system CAs, or a host name the certificate does not name
fail with a clear error; `tls_verify = false` connects and logs a warning. Passwords never show.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator
from typing import Any

import pymysql
import pytest
import redis

from duecast.shared.fanout.keys import Entry, Keys
from duecast.shared.fanout.queue import ReadyQueue, connect_redis
from duecast.shared.settings import MySQLSettings, RedisSettings
from duecast.shared.storage.db import Database, connect
from tests.integration.tls_servers import NoTLS, Pki, TLSMariaDB, TLSRedis, make_pki

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


# --- Redis ------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tls_redis(pki: Pki, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TLSRedis]:
    server = TLSRedis(tmp_path_factory.mktemp("redis"), pki)
    try:
        server.start()
    except NoTLS as exc:  # the only reason to skip: this redis-server cannot do TLS at all
        server.stop()
        pytest.skip(str(exc))
    yield server
    server.stop()


def redis_tls(server: TLSRedis, pki: Pki, **overrides: Any) -> RedisSettings:
    fields: dict[str, Any] = {
        "url": server.url(),
        "key_prefix": f"duecast-test-{uuid.uuid4().hex[:10]}",
        "socket_timeout_s": 3,
        "tls_ca_file": pki.ca,
        "tls_cert_file": pki.client_cert,
        "tls_key_file": pki.client_key,
    }
    return RedisSettings(**{**fields, **overrides})


def redis_failure(settings: RedisSettings) -> redis.RedisError:
    client = connect_redis(settings)
    try:
        with pytest.raises(redis.RedisError) as info:
            client.ping()
    finally:
        client.close()
    return info.value


def test_verified_tls_with_an_acl_user_carries_entries(tls_redis: TLSRedis, pki: Pki) -> None:
    settings = redis_tls(tls_redis, pki)
    client = connect_redis(settings)
    try:
        queue = ReadyQueue(client, Keys(settings.key_prefix))
        queue.push("users", [Entry(1, 1), Entry(2, 7)])
        assert queue.pop(["users"], 10, 0.5) == ("users", [b"1:1", b"2:7"])
        assert client.acl_whoami() == TLSRedis.USER
        conn = client.connection_pool.get_connection()
        try:
            assert conn._sock is not None
            assert conn._sock.version() in {"TLSv1.2", "TLSv1.3"}
        finally:
            client.connection_pool.release(conn)
    finally:
        client.close()


def test_a_wrong_ca_is_refused_with_a_clear_error(tls_redis: TLSRedis, pki: Pki) -> None:
    error = redis_failure(redis_tls(tls_redis, pki, tls_ca_file=pki.other_ca))
    assert isinstance(error, redis.ConnectionError)
    assert "certificate verify failed" in str(error)
    assert tls_redis.password not in str(error)


def test_without_a_ca_file_the_system_cas_are_used_and_do_not_trust_a_private_ca(
    tls_redis: TLSRedis, pki: Pki
) -> None:
    error = redis_failure(redis_tls(tls_redis, pki, tls_ca_file=None))
    assert "certificate verify failed" in str(error)


def test_the_host_name_must_be_in_the_certificate(tls_redis: TLSRedis, pki: Pki) -> None:
    """The certificate names 127.0.0.1 only; "localhost" reaches the same server but must not pass."""
    by_name = tls_redis.url(host="localhost")
    error = redis_failure(redis_tls(tls_redis, pki, url=by_name))
    assert "certificate verify failed" in str(error)
    assert "mismatch" in str(error).lower()

    client = connect_redis(redis_tls(tls_redis, pki, url=by_name, tls_check_hostname=False))
    try:
        assert client.ping()
    finally:
        client.close()


def test_verification_off_connects_and_logs_a_warning(
    tls_redis: TLSRedis, pki: Pki, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="duecast.queue"):
        client = connect_redis(redis_tls(tls_redis, pki, tls_ca_file=pki.other_ca, tls_verify=False))
    try:
        assert client.ping()
    finally:
        client.close()
    assert "redis.tls_verify is false" in caplog.text
    assert tls_redis.password not in caplog.text


def test_the_server_refuses_a_client_without_its_certificate(tls_redis: TLSRedis, pki: Pki) -> None:
    error = redis_failure(redis_tls(tls_redis, pki, tls_cert_file=None, tls_key_file=None))
    assert isinstance(error, redis.ConnectionError)
    assert tls_redis.password not in str(error)


@pytest.mark.parametrize(
    ("user", "password", "expected"),
    [
        (TLSRedis.USER, "wrong-password-5e1c", "invalid username-password pair"),
        ("nobody", None, "invalid username-password pair"),
        ("", "", "Authentication required"),  # the missing secret: no user, no password
    ],
    ids=["wrong-password", "unknown-user", "no-credentials"],
)
def test_bad_or_missing_credentials_fail_clearly_without_printing_them(
    tls_redis: TLSRedis, pki: Pki, user: str, password: str | None, expected: str
) -> None:
    error = redis_failure(redis_tls(tls_redis, pki, url=tls_redis.url(user=user, password=password)))
    assert isinstance(error, redis.AuthenticationError)
    assert expected in str(error)
    for secret in (tls_redis.password, "wrong-password-5e1c"):
        assert secret not in str(error)
        assert secret not in repr(error)


# The ACL docs/security.md recommends, `{prefix}` standing for redis.key_prefix.
LEAST_PRIVILEGE_ACL = (
    "on resetkeys ~{{{prefix}}}:* resetchannels -@all +ping +rpush +lpush +lpop +blmpop +blpop +llen "
    "+ltrim +lrange +hincrby +hgetall +get +set +del +evalsha +script|load +type +rename +expire"
)


def test_the_documented_least_privilege_acl_is_enough_for_every_queue_operation(
    tls_redis: TLSRedis, pki: Pki
) -> None:
    admin = connect_redis(redis_tls(tls_redis, pki))
    user = f"dcsec-{uuid.uuid4().hex[:8]}"
    password = uuid.uuid4().hex
    settings = redis_tls(tls_redis, pki, url=tls_redis.url(user=user, password=password))
    rules = LEAST_PRIVILEGE_ACL.format(prefix=settings.key_prefix).split()
    admin.acl_setuser(user, reset=True)
    admin.execute_command("ACL", "SETUSER", user, f">{password}", *rules)
    client = connect_redis(settings)
    try:
        queue = ReadyQueue(client, Keys(settings.key_prefix))
        queue.push("users", [Entry(1, 1)])
        assert queue.length("users") == 1
        assert queue.pop(["users"], 10, 0.5) == ("users", [b"1:1"])
        assert queue.pop(["users"], 10, 0.1) is None
        queue.push("users", [Entry(2, 1)])
        assert queue.pop_held("w1", ["users"], 10, 0.5) == ("users", [b"2:1"])  # SCRIPT LOAD, EVALSHA
        assert queue.pop_held("w1", ["users"], 10, 0.1) is None
        assert queue.held_by("w1") == ("users", [b"2:1"])
        queue.release_hold("w1")
        assert queue.data_lost() is True
        queue.quarantine("users", [(b"x", "malformed")])
        assert queue.quarantined("users") == [b"malformed x"]
        queue.add_stats("users", {"bad": 1})
        assert queue.stats("users") == {"bad": 1}
        queue.client.lpush(queue.keys.wake(), b"1")  # what Enqueuer.wake() sends
        assert queue.wait_wake(0.5)
        queue.client.set(queue.keys.ready("users"), b"stray")  # a key of the wrong type: moved aside
        queue.push("users", [Entry(3, 1)])
        assert queue.length("users") == 1
        refused_commands = [("FLUSHALL",), ("KEYS", "*"), ("CONFIG", "GET", "*"), ("GET", "other:key")]
        for refused in [*refused_commands, ("RPUSH", "other:key", "x")]:  # the last: not its key
            with pytest.raises(redis.ResponseError, match=r"(?i)no permissions"):
                client.execute_command(*refused)
    finally:
        client.close()
        admin.acl_deluser(user)
        admin.close()


# --- MariaDB ----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tls_mariadb(pki: Pki, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TLSMariaDB]:
    if TLSMariaDB.binaries() is None:
        pytest.skip("no mariadbd + mariadb-install-db on this machine to run a private TLS MariaDB")
    server = TLSMariaDB(tmp_path_factory.mktemp("mariadb"), pki)
    try:
        server.start()
        with server.root() as conn, conn.cursor() as cur:
            cur.execute("SHOW VARIABLES LIKE 'have_ssl'")
            row = cur.fetchone()
            if row is None or row[1] != "YES":
                pytest.skip(f"this mariadbd has no TLS support (have_ssl = {row and row[1]})")
            # An account that must present a client certificate signed by the CA.
            cur.execute("CREATE USER 'dcsec_x509'@'127.0.0.1' REQUIRE X509")
        yield server
    finally:
        server.stop()


def mysql_tls(server: TLSMariaDB, pki: Pki, **overrides: Any) -> MySQLSettings:
    fields: dict[str, Any] = {
        "host": "127.0.0.1",
        "port": server.port,
        "user": "root",
        "password": "",
        "connect_timeout_s": 5,
        "tls": True,
        "tls_ca_file": pki.ca,
    }
    return MySQLSettings(**{**fields, **overrides})


def session_tls(conn: pymysql.Connection[pymysql.cursors.Cursor]) -> tuple[str, str]:
    """The server's view of this session: (Ssl_version, Ssl_cipher); empty strings if plaintext."""
    with conn.cursor() as cur:
        cur.execute("SHOW SESSION STATUS WHERE Variable_name IN ('Ssl_version', 'Ssl_cipher')")
        got = dict(cur.fetchall())
    return str(got.get("Ssl_version", "")), str(got.get("Ssl_cipher", ""))


def mysql_failure(settings: MySQLSettings) -> pymysql.err.OperationalError:
    with pytest.raises(pymysql.err.OperationalError) as info:
        connect(settings, database=False).close()
    return info.value


def test_mysql_verified_tls_connection(tls_mariadb: TLSMariaDB, pki: Pki) -> None:
    settings = mysql_tls(tls_mariadb, pki)
    conn = connect(settings, database=False)
    try:
        version, cipher = session_tls(conn)
        assert version.startswith("TLSv1.")
        assert cipher
    finally:
        conn.close()
    db = Database(settings.model_copy(update={"database": "mysql"}))
    try:
        with db.transaction() as cur:  # the role's path: a whole unit of work over TLS
            cur.execute("SELECT 1")
            assert cur.fetchone() == (1,)
    finally:
        db.close()


def test_mysql_wrong_ca_is_refused_with_a_clear_error(tls_mariadb: TLSMariaDB, pki: Pki) -> None:
    error = mysql_failure(mysql_tls(tls_mariadb, pki, tls_ca_file=pki.other_ca, password="pw-8c1d"))
    assert "CERTIFICATE_VERIFY_FAILED" in str(error)
    assert "pw-8c1d" not in str(error) + repr(error)


def test_mysql_without_a_ca_file_the_system_cas_do_not_trust_a_private_ca(
    tls_mariadb: TLSMariaDB, pki: Pki
) -> None:
    assert "CERTIFICATE_VERIFY_FAILED" in str(mysql_failure(mysql_tls(tls_mariadb, pki, tls_ca_file=None)))


def test_mysql_host_name_must_be_in_the_certificate(tls_mariadb: TLSMariaDB, pki: Pki) -> None:
    # root@localhost exists too, so only the certificate check can refuse this.
    error = mysql_failure(mysql_tls(tls_mariadb, pki, host="localhost"))
    assert "mismatch" in str(error).lower()

    conn = connect(mysql_tls(tls_mariadb, pki, host="localhost", tls_check_hostname=False), database=False)
    try:
        assert session_tls(conn)[1]
    finally:
        conn.close()


def test_mysql_verification_off_connects_and_logs_a_warning(
    tls_mariadb: TLSMariaDB, pki: Pki, caplog: pytest.LogCaptureFixture
) -> None:
    settings = mysql_tls(tls_mariadb, pki, tls_ca_file=None, tls_verify=False, password="")
    with caplog.at_level(logging.WARNING, logger="duecast.db"):
        conn = connect(settings, database=False)
    try:
        assert session_tls(conn)[1]  # still encrypted
    finally:
        conn.close()
    assert "mysql.tls_verify is false" in caplog.text


def test_mysql_client_certificate_for_a_require_x509_account(tls_mariadb: TLSMariaDB, pki: Pki) -> None:
    with_cert = mysql_tls(
        tls_mariadb, pki, user="dcsec_x509", tls_cert_file=pki.client_cert, tls_key_file=pki.client_key
    )
    conn = connect(with_cert, database=False)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT CURRENT_USER()")
            assert cur.fetchone() == ("dcsec_x509@127.0.0.1",)
    finally:
        conn.close()

    error = mysql_failure(mysql_tls(tls_mariadb, pki, user="dcsec_x509"))
    assert error.args[0] == 1045  # access denied: no certificate


def test_mysql_tls_required_never_falls_back_to_plaintext(mysql_settings: MySQLSettings, pki: Pki) -> None:
    """The shared test server: without TLS it must be refused; with TLS, our CA did not sign it."""
    settings = mysql_settings.model_copy(update={"tls": True, "tls_ca_file": pki.ca})
    error = mysql_failure(settings)
    text = str(error)
    assert "SSL is required" in text or "did not set up TLS" in text or "CERTIFICATE_VERIFY_FAILED" in text, (
        text
    )
