"""The health server's HTTP endpoints, metrics, settings and health-port flags."""

from __future__ import annotations

import json
import threading
import uuid
from typing import Any

import pytest
from pydantic import ValidationError

from duecast.shared.process.health import serving, with_port
from duecast.shared.settings import HealthSettings, Settings
from duecast.shared.telemetry import metrics
from tests.unit.ops.health_support import call, failing_probe, make_app, ok_probe

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
