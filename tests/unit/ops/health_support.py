"""Helpers shared by test_health.py and test_health_server.py."""

from __future__ import annotations

import io
from collections.abc import Iterable
from typing import Any
from wsgiref.util import setup_testing_defaults

from duecast.shared.process.health import HealthApp, Liveness, Readiness


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def failing_probe(message: str) -> Any:
    def probe() -> None:
        raise ConnectionError(message)

    return probe


def ok_probe() -> None:
    return None


def call(app: HealthApp, path: str, method: str = "GET") -> tuple[int, dict[str, str], bytes]:
    environ: dict[str, Any] = {"PATH_INFO": path, "REQUEST_METHOD": method}
    setup_testing_defaults(environ)
    environ["wsgi.input"] = io.BytesIO()
    seen: dict[str, Any] = {}

    def start_response(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
        seen["status"], seen["headers"] = status, dict(headers)
        return lambda _data: None

    body: Iterable[bytes] = app(environ, start_response)
    return int(seen["status"].split()[0]), seen["headers"], b"".join(body)


def make_app(stale_after_s: float = 30.0, **probes: Any) -> tuple[HealthApp, FakeClock, Readiness]:
    clock = FakeClock()
    readiness = Readiness(probes or {"mysql": ok_probe, "redis": ok_probe}, max_age_s=20.0, clock=clock)
    return HealthApp("worker", Liveness(stale_after_s, clock), readiness), clock, readiness
