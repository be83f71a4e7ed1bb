"""TLS with certificate verification for Redis, against a private redis-server made for this module.

A throwaway CA (openssl, servers/conftest.py) signs the server's certificate (for IP 127.0.0.1 only) and
a client one. Verified connections work; a wrong CA, the system CAs, or a host name the certificate does
not name fail with a clear error; `tls_verify = false` connects and logs a warning. Passwords never show.
MariaDB's side is test_tls_mysql.py.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from duecast.shared.api.enqueue import Enqueuer
from duecast.shared.api.publish import Publisher
from duecast.shared.entries import Entry
from duecast.shared.fanout.client import connect_redis
from duecast.shared.fanout.keys import Keys
from duecast.shared.fanout.queue import ReadyQueue
from duecast.shared.settings import RedisSettings, Settings
from tests.integration.tls_servers import NoTLS, Pki, TLSRedis

pytestmark = pytest.mark.integration


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
    "on resetkeys ~{{{prefix}}}:* resetchannels -@all +ping +rpush +lpush +sort +blmpop +blpop +llen "
    "+ltrim +lrange +hincrby +hset +hgetall +get +set +del +type +rename +expire +multi +exec +watch "
    "+unwatch +discard"
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
        assert queue.pop_held("w1", ["users"], 10, 0.5) == ("users", [b"2:1"])  # MULTI, SORT ... STORE
        assert queue.pop_held("w1", ["users"], 10, 0.1) is None
        assert queue.held_by("w1") == ("users", [b"2:1"])
        queue.release_hold("w1")
        # A worker's started records (re-scan rows; a supervisor reads them): HSET, HGETALL, DEL.
        queue.release_hold("w1", {b"0": b"users\n5:1", b"1": b"users\n6:1"})  # MULTI, HSET, EXPIRE
        queue.release_hold("w1", {b"0": b""})
        assert queue.started_by("w1") == [("users", [b"6:1"])]
        queue.release_hold("w1", {b"1": b"users\n6:1"}, replace=True)
        queue.release_hold("w1", {}, replace=True)
        queue.forget_started("w1")
        assert queue.started_by("w1") == []
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
        queue.client.hset(queue.keys.stats("users"), "bad", 2**63 - 1)  # a counter at its limit: reset
        queue.add_stats("users", {"bad": 1})
        assert queue.stats("users")["bad"] == 1
        queue.client.set(queue.keys.inflight("w1"), b"users\n4:1")  # an older release's hold still reads
        assert queue.held_by("w1") == ("users", [b"4:1"])
        refused_commands = [("FLUSHALL",), ("KEYS", "*"), ("CONFIG", "GET", "*"), ("GET", "other:key")]
        refused_commands += [("EVAL", "return 1", "0"), ("SCRIPT", "LOAD", "return 1"), ("EVALSHA", "x", "0")]
        for refused in [*refused_commands, ("RPUSH", "other:key", "x")]:  # the last: not its key
            with pytest.raises(redis.ResponseError, match=r"(?i)no permissions"):
                client.execute_command(*refused)
    finally:
        client.close()
        admin.acl_deluser(user)
        admin.close()


# docs/security.md's narrower lines: applications (Enqueuer, Publisher) only send the wake-up; the
# read-only account (`duecast status`, `duecast web`) only reads lengths, counters and holds.
APPLICATION_ACL = "on resetkeys ~{{{prefix}}}:wake resetchannels -@all +lpush +ltrim"
READ_ONLY_ACL = "on resetkeys ~{{{prefix}}}:* resetchannels -@all +ping +llen +lrange +hgetall +get +type"


def test_the_applications_and_read_only_acl_lines_are_enough_and_no_more(
    tls_redis: TLSRedis, pki: Pki
) -> None:
    admin = connect_redis(redis_tls(tls_redis, pki))
    users = {line: f"dcsec-{uuid.uuid4().hex[:8]}" for line in (APPLICATION_ACL, READ_ONLY_ACL)}
    password = uuid.uuid4().hex
    prefix = f"duecast-test-{uuid.uuid4().hex[:10]}"
    clients: list[redis.Redis] = []

    def client_for(line: str) -> RedisSettings:
        admin.acl_setuser(users[line], reset=True)
        admin.execute_command(
            "ACL", "SETUSER", users[line], f">{password}", *line.format(prefix=prefix).split()
        )
        return redis_tls(
            tls_redis, pki, key_prefix=prefix, url=tls_redis.url(user=users[line], password=password)
        )

    keys = Keys(prefix)
    try:
        app = client_for(APPLICATION_ACL)
        client = connect_redis(app)
        clients.append(client)
        for outbox in (Enqueuer(Settings(redis=app), client), Publisher(Settings(redis=app), client)):
            admin.delete(keys.wake())
            outbox.wake()
            assert admin.llen(keys.wake()) == 1
        for refused in (("RPUSH", keys.ready("users"), "1:1"), ("GET", keys.epoch()), ("LPOP", keys.wake())):
            with pytest.raises(redis.ResponseError, match=r"(?i)no permissions"):
                client.execute_command(*refused)

        admin.rpush(keys.ready("users"), b"1:1", b"2:1")
        admin.hincrby(keys.stats("users"), "bad", 2)
        reader = connect_redis(client_for(READ_ONLY_ACL))
        clients.append(reader)
        queue = ReadyQueue(reader, keys)
        reader.ping()
        assert queue.length("users") == 2
        assert queue.stats("users") == {"bad": 2}
        assert queue.quarantined("users") == []
        assert queue.held_by("w1") is None
        for refused in (
            ("RPUSH", keys.ready("users"), "3:1"),
            ("LPOP", keys.ready("users")),
            ("DEL", keys.ready("users")),
            ("HINCRBY", keys.stats("users"), "bad", "1"),
        ):
            with pytest.raises(redis.ResponseError, match=r"(?i)no permissions"):
                reader.execute_command(*refused)
    finally:
        for c in clients:
            c.close()
        for user in users.values():
            admin.acl_deluser(user)
        admin.delete(keys.wake(), keys.ready("users"), keys.stats("users"))
        admin.close()
