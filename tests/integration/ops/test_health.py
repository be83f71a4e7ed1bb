"""The health endpoint on a real port, over HTTP (urllib), with real MariaDB and Redis.

The last tests run the dispatcher and a worker through their production wiring with Redis down: the
loop keeps turning with backoff, so /healthz stays 200 while /readyz says which server is missing.
"""

from __future__ import annotations

import json
import socket
import threading
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from duecast.dispatcher import main as dispatcher_main
from duecast.shared.process.health import serving
from duecast.shared.settings import (
    DispatcherSettings,
    HealthSettings,
    MySQLSettings,
    RedisSettings,
    Settings,
    WorkerSettings,
)
from duecast.shared.telemetry import metrics
from duecast.worker import main as worker_main
from tests.integration import apps
from tests.integration.conftest import Env
from tests.integration.polling import wait_until

pytestmark = pytest.mark.integration


def free_port() -> int:
    """A port nothing listens on (bound and released; nothing else on this host races for it here)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def get(port: int, path: str) -> tuple[int, str, bytes]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as resp:
            return resp.status, resp.headers["Content-Type"], resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers["Content-Type"], exc.read()


def get_json(port: int, path: str) -> tuple[int, dict[str, Any]]:
    status, content_type, body = get(port, path)
    assert content_type == "application/json"
    return status, json.loads(body)


def redis_blamed(port: int) -> bool:
    """/readyz has both round trips' outcomes and only Redis failed (False while nothing listens yet:
    a role builds its stores before it serves)."""
    try:
        status, doc = get_json(port, "/readyz")
    except urllib.error.URLError:
        return False
    checks = doc["checks"]
    return status == 503 and checks["mysql"] == "ok" and checks["redis"] == "failing"


def health(port: int) -> HealthSettings:
    return HealthSettings(port=port, host="127.0.0.1", check_interval_s=0.1)


def dead_redis(redis_settings: RedisSettings) -> RedisSettings:
    return RedisSettings.model_validate(
        {**redis_settings.model_dump(), "url": f"redis://127.0.0.1:{free_port()}/0"}
    )


def test_healthz_readyz_and_metrics_over_http(
    mysql_settings: MySQLSettings, redis_settings: RedisSettings
) -> None:
    port = free_port()
    settings = Settings(
        mysql=mysql_settings, redis=redis_settings, jobs={"enabled": False}, health=health(port)
    )  # type: ignore[arg-type]
    source = f"src_{uuid.uuid4().hex[:8]}"
    metrics.COUNTERS["pushed"].labels(source=source).inc(7)
    with serving(settings, "dispatcher") as liveness:
        wait_until(lambda: get(port, "/readyz")[0] == 200, "/readyz to be 200")
        liveness.beat()
        status, doc = get_json(port, "/healthz")
        assert status == 200
        assert doc["status"] == "ok"
        assert doc["role"] == "dispatcher"
        assert doc["last_turn_age_s"] < 5
        status, doc = get_json(port, "/readyz")
        assert (status, doc["checks"]) == (200, {"mysql": "ok", "redis": "ok"})

        status, content_type, body = get(port, "/metrics")
        text = body.decode()
        assert status == 200
        assert content_type.startswith("text/plain")
        assert f'duecast_pushed_total{{source="{source}"}} 7.0' in text
        assert 'duecast_dependency_up{dependency="mysql"} 1.0' in text
        assert 'duecast_dependency_up{dependency="redis"} 1.0' in text
        assert "duecast_loop_turn_age_seconds " in text
        assert "process_cpu_seconds_total" in text  # the default registry's process collector
        assert get(port, "/")[0] == 404
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2)  # closed with the block


def test_readyz_names_the_server_that_is_down(
    mysql_settings: MySQLSettings, redis_settings: RedisSettings
) -> None:
    port = free_port()
    settings = Settings(
        mysql=mysql_settings,
        redis=dead_redis(redis_settings),
        jobs={"enabled": False},  # type: ignore[arg-type]
        health=health(port),
    )
    with serving(settings, "worker"):
        wait_until(lambda: redis_blamed(port), "/readyz to blame redis")
        status, doc = get_json(port, "/readyz")
        assert status == 503
        assert doc["status"] == "not ready"
        assert doc["checks"]["mysql"] == "ok"
        assert doc["reason"] == "redis: failing"
        assert get_json(port, "/healthz")[0] == 200  # a dead server is not a dead process


def test_a_port_in_use_is_a_clear_error(mysql_settings: MySQLSettings, redis_settings: RedisSettings) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = int(taken.getsockname()[1])
        settings = Settings(
            mysql=mysql_settings, redis=redis_settings, health=health(port), jobs={"enabled": False}
        )  # type: ignore[arg-type]
        in_use = pytest.raises(SystemExit, match=r"cannot listen on 127\.0\.0\.1:\d+ .*--health-port")
        with in_use, serving(settings, "worker"):
            pass


@contextmanager
def running(serve: Callable[[], object], stop: threading.Event) -> Iterator[Callable[[], None]]:
    """Run `serve` in a thread until the block ends; yields a check that raises if it has failed."""
    errors: list[BaseException] = []

    def target() -> None:
        try:
            serve()
        except BaseException as exc:
            errors.append(exc)

    def check() -> None:
        if errors:
            raise AssertionError(f"the role failed: {errors[0]!r}") from errors[0]

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    try:
        yield check
    finally:
        stop.set()
        thread.join(15)
    assert not thread.is_alive(), "the role did not stop"
    check()


@pytest.mark.parametrize("role", ["dispatcher", "worker"])
def test_a_role_with_redis_down_stays_alive_and_is_not_ready(make_env: Callable[..., Env], role: str) -> None:
    env = make_env("rescan", rows=10, name=apps.RESCAN)
    port = free_port()
    settings = env.settings.model_copy(
        update={
            "redis": dead_redis(env.settings.redis),
            "health": health(port),
            "worker": WorkerSettings(
                app="tests.integration.apps:handlers", sources=[env.source.name], block_timeout_s=0.1
            ),
            "dispatcher": DispatcherSettings(poll_interval_s=0.05, run_sweeper=False),
        }
    )
    stop = threading.Event()
    serve = dispatcher_main.serve if role == "dispatcher" else worker_main.serve
    with running(lambda: serve(settings, stop), stop) as check:
        wait_until(
            lambda: check() or redis_blamed(port), f"the {role}'s /readyz to blame redis", timeout_s=20
        )
        status, doc = get_json(port, "/healthz")
        assert (status, doc["role"]) == (200, role)
        assert doc["last_turn_age_s"] < 11  # the loop turns, backing off at most 10 s between ticks
        assert get_json(port, "/readyz")[1]["reason"] == "redis: failing"
