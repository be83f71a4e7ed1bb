"""The one place a Redis client is made (a single server, a Sentinel-managed master or a Cluster), and
where redis-py's errors become duecast's (fanout.protocol: QueueError, QueueUnavailable). Wiring and
the queue import this; the roles never do.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, ParamSpec, TypeAlias, TypeVar, cast

import redis
from redis.backoff import NoBackoff
from redis.cluster import RedisCluster
from redis.connection import parse_url
from redis.retry import Retry
from redis.sentinel import Sentinel

from ..settings import RedisSettings
from .protocol import QueueError, QueueUnavailable
from .sentinel import FollowingMasterPool

P = ParamSpec("P")
T = TypeVar("T")
# What wiring hands around (an Enqueuer's wake-ups, the readiness probe), so no caller imports redis
# for a type.
RedisClient: TypeAlias = redis.Redis

log = logging.getLogger("duecast.queue")


def connect_redis(settings: RedisSettings) -> redis.Redis:
    """The one place a Redis client is made: a single server, a Sentinel-managed master or a Cluster.

    ACL user and password come from the URL (checked by the settings: no ?options that could override
    the TLS ones below), TLS from rediss://. redis-py's errors and reprs never show the password.
    """
    options: dict[str, Any] = {
        "socket_timeout": settings.socket_timeout_s,
        "socket_connect_timeout": settings.socket_timeout_s,
        # No per-command retries: a re-sent RPUSH whose first send landed duplicates entries, and
        # a re-sent BLMPOP can drop what the first one popped. duecast retries whole units of
        # work instead (the loop's backoff), where MySQL decides what is still to do.
        "retry": Retry(NoBackoff(), 0),
        **_tls_options(settings),
    }
    url = settings.url.get_secret_value()
    if settings.sentinels:
        return _sentinel_master(settings, url, options)
    if settings.cluster:
        # Every key of one prefix carries the `{prefix}` hash tag, so multi-key BLMPOP and the
        # pipelines stay in one slot. A MOVED reply is followed (the command did not run there);
        # with retry 0 a connection error is never re-sent. The cast: duecast calls only commands
        # RedisCluster shares with Redis, and test_redis_topology.py runs them against a cluster.
        cluster = RedisCluster.from_url(url, **options)
        return cast(redis.Redis, cluster)
    return redis.Redis.from_url(url, health_check_interval=30, **options)


def _sentinel_master(settings: RedisSettings, url: str, options: dict[str, Any]) -> redis.Redis:
    """A client for the master the Sentinels name; it asks them again at most once a second from its
    own commands, and leaves a replaced master within about a second (fanout.sentinel).

    The URL gives the master's user, password and db (its host is not used). The Sentinels are
    reached with the same timeouts and TLS, without a password (Sentinel's own ACL is not supported).
    """
    # redis.sentinel and parse_url carry no type hints, hence the ignores and the cast.
    parts: dict[str, Any] = parse_url(url)  # type: ignore[no-untyped-call]
    credentials = {k: v for k, v in parts.items() if k in {"username", "password", "db"}}
    sentinel_options = {**options, "ssl": settings.tls}
    sentinel = Sentinel(settings.sentinel_addresses(), sentinel_kwargs=sentinel_options)  # type: ignore[no-untyped-call]
    assert settings.sentinel_service is not None  # the validator sets both or neither
    master = sentinel.master_for(  # type: ignore[no-untyped-call]
        settings.sentinel_service,
        connection_pool_class=FollowingMasterPool,
        health_check_interval=30,
        **sentinel_options,
        **credentials,
    )
    return cast(redis.Redis, master)


def _tls_options(settings: RedisSettings) -> dict[str, Any]:
    """redis-py's TLS arguments, all explicit: its defaults changed between releases (5.x did not
    check host names)."""
    if not settings.tls:
        return {}
    if not settings.tls_verify:
        log.warning(
            "redis.tls_verify is false: the connection to Redis is encrypted, but anyone on the "
            "network path can impersonate the server"
        )
    return {
        "ssl_ca_certs": _path(settings.tls_ca_file),
        "ssl_certfile": _path(settings.tls_cert_file),
        "ssl_keyfile": _path(settings.tls_key_file),
        "ssl_cert_reqs": "required" if settings.tls_verify else "none",
        "ssl_check_hostname": settings.tls_verify and settings.tls_check_hostname,
    }


def _path(path: Path | None) -> str | None:
    return None if path is None else str(path)


# Everything a Redis call may raise for a server-side or connection reason. A cluster client's own
# errors (no node answers, a slot not covered) do not derive from RedisError.
REDIS_ERRORS: tuple[type[Exception], ...] = (redis.RedisError, redis.exceptions.RedisClusterException)
# A failover in progress, as the server or client says it: a cluster whose slot's master is gone
# (CLUSTERDOWN, MASTERDOWN, redirections exhausted), Sentinels naming no master yet
# (MasterNotFoundError is a ConnectionError), or a demoted master refusing writes (READONLY). Each
# passes on its own, like a refused connection: one WARNING line, retried, never a traceback.
FAILOVER_ERRORS: tuple[type[Exception], ...] = (
    redis.exceptions.ClusterError,  # ClusterDownError and MasterDownError derive from it
    redis.exceptions.ReadOnlyError,
)
# A Redis Cluster slot being moved to another master (a reshard): while duecast's slot is half
# moved, a MULTI (the pop-and-hold, a hold's release) whose keys are not all on one node is refused
# whole, TRYAGAIN, or ASK on the old owner; once the slot is moved, MOVED. redis-py follows ASK and
# MOVED for single commands and plain pipelines, never for a MULTI (it would need ASKING inside
# it), so the transaction raises; nothing in it ran, and the tick is retried once the slot settles.
# A MOVED that never stops means a client without redis.cluster talking to a cluster: the line says.
SLOT_MOVING_ERRORS: tuple[type[Exception], ...] = (
    redis.exceptions.AskError,  # MovedError derives from it
    redis.exceptions.TryAgainError,
)


def redis_problem(exc: BaseException) -> tuple[str, bool] | None:
    """A Redis error at start-up as (one line naming the setting and what to do, server unavailable?),
    or None when it is not about reaching the server. redis-py's messages name host and port, never
    the password. A QueueError (translated at the port) is judged by the redis-py error it stands for."""
    if isinstance(exc, QueueError) and exc.__cause__ is not None:
        exc = exc.__cause__
    said = " ".join(str(exc).split())
    if isinstance(exc, redis.AuthenticationError | redis.exceptions.AuthorizationError):
        return f"Redis refused the credentials ({said}); check the password or user in redis.url", False
    if isinstance(exc, redis.exceptions.NoPermissionError):
        return (
            f"Redis refused a command ({said}); give redis.url's ACL user the commands "
            "docs/security.md lists for this role",
            False,
        )
    if isinstance(exc, FAILOVER_ERRORS):
        line = f"Redis is failing over ({type(exc).__name__}: {said}); it passes: try again in a few seconds"
        return line, True
    if isinstance(exc, SLOT_MOVING_ERRORS):
        line = (
            f"a Redis Cluster slot is moving ({type(exc).__name__}: {said}); it passes once it has "
            "moved (if it never stops, set redis.cluster = true: the server is a cluster node)"
        )
        return line, True
    if isinstance(exc, redis.ConnectionError | redis.TimeoutError | redis.exceptions.RedisClusterException):
        return f"Redis: {said}; start Redis, or fix redis.url (DUECAST_REDIS__URL)", True
    return None


def translate(exc: BaseException) -> BaseException:
    """duecast's error for a redis-py error (the same object for anything else): QueueUnavailable when
    the server could not be reached or did not answer (what redis_problem calls unavailable), else
    QueueError. The message keeps redis-py's class name, so a log line still says what Redis said."""
    if not isinstance(exc, REDIS_ERRORS):
        return exc
    found = redis_problem(exc)
    kind = QueueUnavailable if found is not None and found[1] else QueueError
    return kind(f"{type(exc).__name__}: {exc}")


@contextmanager
def translated() -> Iterator[None]:
    """Raise duecast's error in place of a redis-py error from the block, chained to it."""
    try:
        yield
    except REDIS_ERRORS as exc:
        raise translate(exc) from exc


def translating(method: Callable[P, T]) -> Callable[P, T]:
    """`method`, raising duecast's error in place of a redis-py error: every public ReadyQueue method."""

    @functools.wraps(method)
    def call(*args: P.args, **kwargs: P.kwargs) -> T:
        try:
            return method(*args, **kwargs)
        except REDIS_ERRORS as exc:
            raise translate(exc) from exc

    return call
