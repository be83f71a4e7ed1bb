"""shared/process/health.py and shared/telemetry/metrics.py without a socket: liveness and readiness on a
fake clock, the
WSGI app called directly, the loop's turn hook, and the --health-port override.

The HTTP endpoints, metrics and port flags are in test_health_server.py.
The real server on a real port, with real MySQL and Redis, is tests/integration/ops/test_health.py.
"""

from __future__ import annotations

import json
import logging
import threading
import uuid

import pytest
from prometheus_client import REGISTRY

from duecast.shared.process.health import Liveness, Readiness
from duecast.shared.process.loop import Tick, run
from tests.unit.ops.health_support import FakeClock, call, failing_probe, make_app, ok_probe

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
