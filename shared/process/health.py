"""The per-process HTTP endpoint: /healthz (the main loop turns), /readyz (MySQL and Redis answer) and
/metrics (Prometheus text), served from daemon threads. It never uses a role's own clients: readiness
makes its own round trips, so a probe can neither block nor break a unit of work. The endpoint is
unauthenticated: why a dependency fails goes to the log, never into a response.
"""

from __future__ import annotations

import json
import logging
import socket
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server
from wsgiref.types import StartResponse, WSGIApplication, WSGIEnvironment

from prometheus_client import REGISTRY, CollectorRegistry, make_wsgi_app

from ..fanout.client import RedisClient, connect_redis
from ..settings import HealthSettings, MySQLSettings, Settings
from ..storage.db import connect
from ..storage.units import Connection
from ..telemetry import metrics

log = logging.getLogger("duecast.health")

Clock = Callable[[], float]
Probe = Callable[[], None]  # one round trip to a dependency; raises when it fails
_ERROR_CHARS = 300  # a reason is for a human reading the log, not a stack trace
FAILING = "failing"  # what /readyz says of a dependency whose last round trip failed (the log says why)


class Liveness:
    """When the role's loop last turned. A loop backing off from a dead server still turns, so MySQL
    or Redis being down never makes a process look dead (restarting it would not bring them back)."""

    def __init__(self, stale_after_s: float, clock: Clock = time.monotonic) -> None:
        self.stale_after_s = stale_after_s
        self._clock = clock
        self._last = clock()  # start-up counts as a turn: the first tick gets the same grace

    def beat(self) -> None:
        self._last = self._clock()

    def age_s(self) -> float:
        return max(0.0, self._clock() - self._last)

    def alive(self) -> bool:
        return self.age_s() <= self.stale_after_s


@dataclass(frozen=True)
class Outcome:
    ok: bool
    at: float  # clock time when the round trip ended
    error: str = ""


class Readiness:
    """The last round trip to each dependency. `refresh()` makes them (from the checker thread);
    `report()` only reads, so a probe request never waits on a server."""

    def __init__(self, probes: Mapping[str, Probe], max_age_s: float, clock: Clock = time.monotonic) -> None:
        self._probes = dict(probes)
        self.max_age_s = max_age_s  # an older outcome means the round trip hangs: not ready
        self._clock = clock
        self._outcomes: dict[str, Outcome] = {}
        self._lock = threading.Lock()

    def refresh(self) -> None:
        for name, probe in self._probes.items():
            try:
                probe()
                outcome = Outcome(True, self._clock())
            except Exception as exc:
                outcome = Outcome(False, self._clock(), f"{type(exc).__name__}: {exc}"[:_ERROR_CHARS])
            metrics.DEPENDENCY_UP.labels(dependency=name).set(1 if outcome.ok else 0)
            with self._lock:
                before = self._outcomes.get(name)
                self._outcomes[name] = outcome
            _log_change(name, before, outcome)

    def report(self) -> dict[str, str]:
        """Per dependency: "ok", "failing" (the log says why), or how long no round trip completed."""
        now = self._clock()
        with self._lock:
            outcomes = dict(self._outcomes)
        report = {}
        for name in self._probes:
            outcome = outcomes.get(name)
            if outcome is None:
                report[name] = "no round trip yet"
            elif now - outcome.at > self.max_age_s:
                report[name] = f"no round trip completed for {now - outcome.at:.0f}s"
            else:
                report[name] = "ok" if outcome.ok else FAILING
        return report


def _log_change(name: str, before: Outcome | None, now: Outcome) -> None:
    """A line when a dependency starts failing, fails differently, or recovers: not one per check."""
    if not now.ok and (before is None or before.ok or before.error != now.error):
        log.warning(
            "readiness: %s round trip failed: %s",
            name,
            now.error,
            extra={"event": "health.dependency_failed", "dependency": name},
        )
    elif now.ok and before is not None and not before.ok:
        log.info(
            "readiness: %s answers again", name, extra={"event": "health.dependency_ok", "dependency": name}
        )


class HealthApp:
    """The WSGI app: JSON for the two probes, prometheus-client's own app for /metrics."""

    def __init__(
        self, role: str, liveness: Liveness, readiness: Readiness, registry: CollectorRegistry = REGISTRY
    ) -> None:
        self.role = role
        self.liveness = liveness
        self.readiness = readiness
        self._metrics = make_wsgi_app(registry)

    def __call__(self, environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "")
        if environ.get("REQUEST_METHOD") not in {"GET", "HEAD"}:
            return _json(start_response, 405, {"error": "only GET and HEAD"})
        if path == "/metrics":
            return self._metrics(environ, start_response)  # type: ignore[no-any-return]
        if path == "/healthz":
            return self._healthz(start_response)
        if path == "/readyz":
            return self._readyz(start_response)
        return _json(
            start_response, 404, {"error": "not found", "paths": ["/healthz", "/readyz", "/metrics"]}
        )

    def _healthz(self, start_response: StartResponse) -> list[bytes]:
        alive = self.liveness.alive()
        body = {
            "status": "ok" if alive else "stale",
            "role": self.role,
            "last_turn_age_s": round(self.liveness.age_s(), 3),
            "stale_after_s": self.liveness.stale_after_s,
        }
        return _json(start_response, 200 if alive else 503, body)

    def _readyz(self, start_response: StartResponse) -> list[bytes]:
        checks = self.readiness.report()
        failing = {name: why for name, why in checks.items() if why != "ok"}
        body: dict[str, Any] = {"status": "not ready" if failing else "ready", "role": self.role}
        if failing:
            body["reason"] = "; ".join(f"{name}: {why}" for name, why in failing.items())
        body["checks"] = checks
        return _json(start_response, 503 if failing else 200, body)


def _json(start_response: StartResponse, status: int, body: Mapping[str, Any]) -> list[bytes]:
    data = json.dumps(body).encode()
    reason = {200: "OK", 404: "Not Found", 405: "Method Not Allowed", 503: "Service Unavailable"}[status]
    start_response(
        f"{status} {reason}",
        [
            ("Content-Type", "application/json"),
            ("Content-Length", str(len(data))),
            ("Cache-Control", "no-store"),
        ],
    )
    return [data]


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True  # a scraper that never hangs up must not keep the process alive


class _Server6(_Server):
    address_family = socket.AF_INET6


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        # Probes arrive every few seconds from every kubelet: not worth a log line each.
        log.debug("%s %s", self.address_string(), format % args)


class HealthServer:
    """A threaded WSGI server in a daemon thread; port 0 binds a free port (see `.port`)."""

    def __init__(self, app: WSGIApplication, host: str, port: int) -> None:
        server_class = _Server6 if ":" in host else _Server
        self._httpd = make_server(host, port, app, server_class=server_class, handler_class=_QuietHandler)
        self.port: int = self._httpd.server_port
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="duecast-health", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join()


class Checker:
    """Refreshes readiness every `interval_s` in a daemon thread, which alone uses the probes' clients
    and closes them (`on_exit`) when stopped: PyMySQL connections are not thread-safe."""

    def __init__(self, readiness: Readiness, interval_s: float, on_exit: Callable[[], None]) -> None:
        self._readiness = readiness
        self._interval_s = interval_s
        self._on_exit = on_exit
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="duecast-readiness", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def close(self, timeout_s: float = 2.0) -> None:
        self._stop.set()
        self._thread.join(timeout_s)  # a round trip hung on a dead server must not hold up exit

    def _run(self) -> None:
        try:
            while True:
                self._readiness.refresh()
                if self._stop.wait(self._interval_s):
                    return
        finally:
            self._on_exit()


class MySQLPing:
    """A COM_PING on a connection of its own: a round trip with no SQL text and no transaction."""

    def __init__(self, settings: MySQLSettings) -> None:
        self._settings = settings
        self._conn: Connection | None = None

    def __call__(self) -> None:
        if self._conn is None:
            self._conn = connect(self._settings)
        try:
            self._conn.ping(reconnect=False)
        except Exception:
            self.close()  # the next round trip reconnects
            raise

    def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.close()
            except Exception:
                log.debug("closing the readiness connection failed", exc_info=True)


def _redis_ping(client: RedisClient) -> Probe:
    def ping() -> None:
        client.ping()

    return ping


def with_port(settings: Settings, port: int | None) -> Settings:
    """`settings` with health.port replaced (a --health-port flag), validated like the setting."""
    if port is None:
        return settings
    health = HealthSettings.model_validate({**settings.health.model_dump(), "port": port})
    return settings.model_copy(update={"health": health})


@contextmanager
def serving(settings: Settings, role: str) -> Iterator[Liveness]:
    """Serve the endpoint for the duration of the block when health.port is set (0 = off).

    Yields the Liveness the role's loop beats every turn; with no endpoint a beat is one clock read.
    """
    cfg = settings.health
    liveness = Liveness(cfg.stale_after_s)
    if cfg.port == 0:
        yield liveness
        return
    mysql_ping, redis_client = MySQLPing(settings.mysql), connect_redis(settings.redis)
    # Three missed refreshes, plus time for one slow round trip, before a hang counts as not ready.
    readiness = Readiness(
        {"mysql": mysql_ping, "redis": _redis_ping(redis_client)}, max_age_s=3 * cfg.check_interval_s + 5
    )
    try:
        server = HealthServer(HealthApp(role, liveness, readiness), cfg.host, cfg.port)
    except OSError as exc:
        redis_client.close()
        raise SystemExit(
            f"health: cannot listen on {cfg.host}:{cfg.port} ({exc.strerror}); processes sharing a "
            "host need a port each (--health-port)"
        ) from exc

    def close_clients() -> None:
        mysql_ping.close()
        redis_client.close()

    checker = Checker(readiness, cfg.check_interval_s, on_exit=close_clients)
    metrics.LOOP_TURN_AGE.set_function(liveness.age_s)
    checker.start()
    server.start()
    log.info("health: /healthz /readyz /metrics on %s:%d", cfg.host, server.port)
    try:
        yield liveness
    finally:
        server.close()
        checker.close()
