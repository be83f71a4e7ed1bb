"""shared/process/health.py and shared/telemetry/metrics.py without a socket: liveness and readiness on a
fake clock, the
WSGI app called directly, the loop's turn hook, and the --health-port override.

The real server on a real port, with real MySQL and Redis, is tests/integration/ops/test_health.py.
"""

from __future__ import annotations

import io
import json
import logging
import threading
import uuid
from collections.abc import Iterable
from typing import Any
from wsgiref.util import setup_testing_defaults

import pytest
from prometheus_client import REGISTRY
from pydantic import ValidationError

from duecast.shared.process.health import HealthApp, Liveness, Readiness, serving, with_port
from duecast.shared.process.loop import Tick, run
from duecast.shared.settings import HealthSettings, Settings
from duecast.shared.telemetry import metrics


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


# -- liveness -----------------------------------------------------------------------------------------


def test_liveness_counts_start_up_as_a_turn_and_goes_stale_after_the_limit() -> None:
    clock = FakeClock()
    live = Liveness(30.0, clock)
    clock.now += 30.0
    assert live.alive()
    clock.now += 0.1
    assert not live.alive()
    live.beat()
    assert live.alive()
    assert live.age_s() == 0.0


def test_the_loop_beats_on_every_turn_failed_ticks_included() -> None:
    stop = threading.Event()
    script: list[Tick | Exception] = [
        Tick(0.0, idle=False),
        RuntimeError("MySQL is down"),
        Tick(0.0, idle=True),
    ]
    beats: list[int] = []

    class Role:
        name = "scripted"

        def tick(self) -> Tick:
            step = script.pop(0)
            if isinstance(step, Exception):
                raise step
            return step

    run(Role(), stop, drain=True, error_base_s=0.001, error_cap_s=0.001, on_turn=lambda: beats.append(1))
    assert len(beats) == 3


# -- readiness ----------------------------------------------------------------------------------------


def test_readiness_is_unknown_until_the_first_round_trip() -> None:
    readiness = Readiness({"mysql": ok_probe}, max_age_s=10.0, clock=FakeClock())
    assert readiness.report() == {"mysql": "no round trip yet"}
    readiness.refresh()
    assert readiness.report() == {"mysql": "ok"}


def test_readiness_reports_the_failing_dependency_and_logs_its_error(
    caplog: pytest.LogCaptureFixture,
) -> None:
    name = f"dep_{uuid.uuid4().hex[:6]}"
    readiness = Readiness({"mysql": ok_probe, name: failing_probe("refused")}, max_age_s=10.0)
    readiness.refresh()
    assert readiness.report() == {"mysql": "ok", name: "failing"}
    assert f"readiness: {name} round trip failed: ConnectionError: refused" in caplog.messages
    assert REGISTRY.get_sample_value("duecast_dependency_up", {"dependency": name}) == 0.0
    assert REGISTRY.get_sample_value("duecast_dependency_up", {"dependency": "mysql"}) == 1.0


def test_an_old_outcome_means_the_round_trip_hangs() -> None:
    clock = FakeClock()
    readiness = Readiness({"redis": ok_probe}, max_age_s=10.0, clock=clock)
    readiness.refresh()
    clock.now += 10.0
    assert readiness.report() == {"redis": "ok"}
    clock.now += 2.0
    assert readiness.report() == {"redis": "no round trip completed for 12s"}


def test_a_long_error_is_cut_short_in_the_log(caplog: pytest.LogCaptureFixture) -> None:
    readiness = Readiness({"mysql": failing_probe("x" * 5000)}, max_age_s=10.0)
    readiness.refresh()
    (message,) = caplog.messages
    assert message == "readiness: mysql round trip failed: " + ("ConnectionError: " + "x" * 5000)[:300]


class AuthenticationError(Exception):
    """Stands in for redis-py's, whose text the probe saw in /readyz (issue 17)."""


def test_readyz_carries_no_error_text_and_the_log_has_it_once_per_change(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="duecast.health")
    state = {"error": "invalid username-password pair"}

    def redis_probe() -> None:
        if state["error"]:
            raise AuthenticationError(state["error"])

    app, _, readiness = make_app(mysql=ok_probe, redis=redis_probe)
    for _ in range(3):
        readiness.refresh()
    status, _, body = call(app, "/readyz")
    assert status == 503
    assert json.loads(body) == {
        "status": "not ready",
        "role": "worker",
        "reason": "redis: failing",
        "checks": {"mysql": "ok", "redis": "failing"},
    }
    for secret_ish in (b"username", b"password", b"AuthenticationError", b"invalid"):
        assert secret_ish not in body
    failed = "readiness: redis round trip failed: AuthenticationError: invalid username-password pair"
    assert caplog.messages == [failed]  # three failed checks, one line
    state["error"] = "NOAUTH Authentication required."
    readiness.refresh()
    state["error"] = ""
    readiness.refresh()
    readiness.refresh()
    assert caplog.messages == [
        failed,
        "readiness: redis round trip failed: AuthenticationError: NOAUTH Authentication required.",
        "readiness: redis answers again",
    ]
    assert call(app, "/readyz")[0] == 200


# -- the WSGI app -------------------------------------------------------------------------------------


def test_healthz_is_200_while_the_loop_turns_even_when_every_dependency_is_down() -> None:
    app, _, readiness = make_app(mysql=failing_probe("down"), redis=failing_probe("down"))
    readiness.refresh()
    status, headers, body = call(app, "/healthz")
    assert status == 200
    assert headers["Content-Type"] == "application/json"
    assert json.loads(body) == {
        "status": "ok",
        "role": "worker",
        "last_turn_age_s": 0.0,
        "stale_after_s": 30.0,
    }
    assert call(app, "/readyz")[0] == 503


def test_healthz_is_503_once_the_loop_has_not_turned_for_stale_after_s() -> None:
    app, clock, _ = make_app(stale_after_s=30.0)
    clock.now += 31.0
    status, _, body = call(app, "/healthz")
    assert status == 503
    assert json.loads(body)["status"] == "stale"
    app.liveness.beat()
    assert call(app, "/healthz")[0] == 200


def test_readyz_is_200_when_every_last_round_trip_succeeded() -> None:
    app, _, readiness = make_app()
    assert call(app, "/readyz")[0] == 503  # nothing checked yet
    readiness.refresh()
    status, _, body = call(app, "/readyz")
    assert status == 200
    assert json.loads(body) == {"status": "ready", "role": "worker", "checks": {"mysql": "ok", "redis": "ok"}}


def test_readyz_is_503_with_a_json_reason_naming_the_dependency() -> None:
    app, _, readiness = make_app(mysql=ok_probe, redis=failing_probe("Error 111 connecting to redis:6379"))
    readiness.refresh()
    status, _, body = call(app, "/readyz")
    assert status == 503
    doc = json.loads(body)
    assert doc["status"] == "not ready"
    assert doc["reason"] == "redis: failing"
    assert b"Error 111" not in body
    assert doc["checks"]["mysql"] == "ok"


def test_metrics_serves_prometheus_text_with_duecast_counters() -> None:
    source = f"src_{uuid.uuid4().hex[:8]}"
    metrics.add(source, {"acked": 3, "stale_acks": 0})
    metrics.COUNTERS["claimed"].labels(source=source).inc(5)
    app, _, _ = make_app()
    status, headers, body = call(app, "/metrics")
    assert status == 200
    assert headers["Content-Type"].startswith("text/plain")
    text = body.decode()
    assert f'duecast_acked_total{{source="{source}"}} 3.0' in text
    assert f'duecast_claimed_total{{source="{source}"}} 5.0' in text
    assert f'duecast_stale_acks_total{{source="{source}"}}' not in text  # zero counts add no series
    assert "# TYPE duecast_batch_duration_seconds histogram" in text


def test_metrics_add_refuses_a_name_without_a_counter() -> None:
    with pytest.raises(KeyError):
        metrics.add("s", {"no_such_counter": 1})


def test_the_stable_counter_names_are_all_there() -> None:
    for name in (
        "claimed",
        "pushed",
        "started",
        "acked",
        "retried",
        "dead",
        "stale_acks",
        "bad_entries",
        "redeliveries",
    ):
        assert name in metrics.COUNTERS


def test_unknown_paths_are_404_and_other_methods_405() -> None:
    app, _, _ = make_app()
    assert call(app, "/nope")[0] == 404
    assert call(app, "/healthz", method="POST")[0] == 405
    assert call(app, "/healthz", method="HEAD")[0] == 200


# -- settings and wiring ------------------------------------------------------------------------------


def test_health_settings_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DUECAST_HEALTH__PORT", "9180")
    monkeypatch.setenv("DUECAST_HEALTH__STALE_AFTER_S", "300")
    health = Settings().health
    assert (health.port, health.host, health.stale_after_s) == (9180, "127.0.0.1", 300.0)
    assert HealthSettings().port == 0  # off unless asked for
    monkeypatch.setenv("DUECAST_HEALTH__HOST", "0.0.0.0")  # noqa: S104
    assert Settings().health.host == "0.0.0.0"  # noqa: S104


def test_with_port_overrides_and_validates() -> None:
    settings = Settings()
    assert with_port(settings, None) is settings
    assert with_port(settings, 9181).health.port == 9181
    assert with_port(settings, 9181).health.stale_after_s == settings.health.stale_after_s
    with pytest.raises(ValidationError):
        with_port(settings, 70_000)


def test_port_0_serves_nothing_but_still_gives_a_liveness() -> None:
    before = {t.name for t in threading.enumerate()}
    with serving(Settings(), "worker") as liveness:
        liveness.beat()
        assert liveness.alive()
        started = {t.name for t in threading.enumerate()} - before
    assert not {"duecast-health", "duecast-readiness"} & started


@pytest.mark.parametrize("module", ["duecast.dispatcher.main", "duecast.worker.main"])
def test_both_roles_take_a_health_port_flag(module: str, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[Settings] = []

    class Parsed(Exception):
        pass

    def fake_serve(settings: Settings, *_a: Any, **_k: Any) -> None:
        seen.append(settings)
        raise Parsed

    mod = __import__(module, fromlist=["main"])
    monkeypatch.setattr(mod, "start_process", lambda _config: (Settings(), threading.Event()))
    monkeypatch.setattr(mod, "serve", fake_serve)
    with pytest.raises(Parsed):
        mod.main(
            [
                "--health-port",
                "9190",
                *(["--app", "duecast.examples.block_check"] if "worker" in module else []),
            ]
        )
    assert seen[0].health.port == 9190
