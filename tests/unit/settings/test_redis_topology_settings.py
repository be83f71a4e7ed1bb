"""redis.sentinels / redis.cluster: what the settings refuse, and which client connect_redis builds.

No server is contacted: redis-py connects lazily. The real servers:
tests/integration/servers/test_redis_topology.py.
"""

from __future__ import annotations

from typing import Any

import pytest
import redis
from pydantic import SecretStr, ValidationError
from redis.backoff import NoBackoff
from redis.cluster import RedisCluster
from redis.sentinel import SentinelConnectionPool, SentinelManagedSSLConnection

from duecast.shared.fanout.client import connect_redis
from duecast.shared.settings import RedisSettings


def settings(url: str = "redis://u:secret@cache:6379/2", **fields: Any) -> RedisSettings:
    return RedisSettings(url=SecretStr(url), **fields)


@pytest.mark.parametrize(
    ("fields", "url", "message"),
    [
        ({"sentinels": ["s1:26379"]}, "redis://h:1/0", "must be set together"),
        ({"sentinel_service": "mymaster"}, "redis://h:1/0", "must be set together"),
        (
            {"sentinels": ["s1:26379"], "sentinel_service": "m", "cluster": True},
            "redis://h:1/0",
            "exclude each other",
        ),
        ({"sentinels": ["s1"], "sentinel_service": "m"}, "redis://h:1/0", "is not host:port"),
        ({"sentinels": ["s1:0"], "sentinel_service": "m"}, "redis://h:1/0", "is not host:port"),
        ({"sentinels": [":26379"], "sentinel_service": "m"}, "redis://h:1/0", "is not host:port"),
        ({"sentinels": ["s1:26379"], "sentinel_service": "m"}, "unix:///tmp/r.sock", "need a redis://"),
        ({"cluster": True}, "unix:///tmp/r.sock", "need a redis://"),
        ({"cluster": True}, "redis://h:6379/1", "needs database 0"),
        ({"sentinels": ["s1:26379"], "sentinel_service": "bad name"}, "redis://h:1/0", "sentinel_service"),
    ],
)
def test_refused(fields: dict[str, Any], url: str, message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        settings(url, **fields)


def test_refusals_never_quote_the_url() -> None:
    with pytest.raises(ValidationError) as caught:
        settings("redis://u:hunter2@h:6379/1", cluster=True)
    assert "hunter2" not in str(caught.value)


def test_accepted() -> None:
    s = settings(sentinels=["s1:26379", "10.0.0.2:26380", "[::1]:26379"], sentinel_service="mymaster")
    assert s.sentinel_addresses() == [("s1", 26379), ("10.0.0.2", 26380), ("[::1]", 26379)]
    assert settings("redis://h:6379", cluster=True).cluster
    assert settings("rediss://h:6379/0", cluster=True).tls


def test_single_server_client() -> None:
    client = connect_redis(settings())
    assert type(client) is redis.Redis
    kwargs = client.connection_pool.connection_kwargs
    assert (kwargs["host"], kwargs["db"], kwargs["socket_timeout"]) == ("cache", 2, 5.0)


def test_sentinel_client() -> None:
    s = settings(sentinels=["s1:26379", "s2:26379"], sentinel_service="mymaster", socket_timeout_s=3)
    client = connect_redis(s)
    pool = client.connection_pool
    assert isinstance(pool, SentinelConnectionPool)
    assert pool.service_name == "mymaster"
    kwargs = pool.connection_kwargs
    assert (kwargs["username"], kwargs["password"], kwargs["db"]) == ("u", "secret", 2)
    assert kwargs["socket_timeout"] == kwargs["socket_connect_timeout"] == 3
    assert isinstance(kwargs["retry"]._backoff, NoBackoff)
    assert kwargs["retry"].get_retries() == 0
    sentinels = pool.sentinel_manager.sentinels
    assert [c.connection_pool.connection_kwargs["host"] for c in sentinels] == ["s1", "s2"]
    assert sentinels[0].connection_pool.connection_kwargs["socket_timeout"] == 3
    assert "secret" not in repr(client)


def test_sentinel_client_with_tls() -> None:
    s = settings(
        "rediss://u:p@ignored:6380/0", sentinels=["s1:26379"], sentinel_service="m", tls_verify=False
    )
    pool = connect_redis(s).connection_pool
    assert isinstance(pool, SentinelConnectionPool)
    assert pool.connection_class is SentinelManagedSSLConnection
    assert pool.connection_kwargs["ssl_cert_reqs"] == "none"
    sentinel = pool.sentinel_manager.sentinels[0].connection_pool
    assert sentinel.connection_class is redis.SSLConnection


def test_cluster_client(monkeypatch: pytest.MonkeyPatch) -> None:
    built: dict[str, Any] = {}

    def from_url(url: str, **options: Any) -> str:  # RedisCluster's constructor connects at once
        built.update(options, url=url)
        return "cluster"

    monkeypatch.setattr(RedisCluster, "from_url", from_url)
    assert connect_redis(settings("redis://u:p@node1:6379/0", cluster=True)) == "cluster"  # type: ignore[comparison-overlap]
    assert built["url"] == "redis://u:p@node1:6379/0"
    assert built["socket_timeout"] == built["socket_connect_timeout"] == 5.0
    assert built["retry"].get_retries() == 0
