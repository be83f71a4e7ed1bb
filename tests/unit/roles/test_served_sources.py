"""Which sources a worker serves (worker.main.served_sources, pure): with worker.sources unset, every
configured source the app has handlers for, the others named in one warning at start (issue 16.4);
a source named on purpose, or an app with nothing configured to serve, still ends the start."""

from __future__ import annotations

import logging

import pytest

from duecast.shared.process.failures import StartupError
from duecast.shared.settings import Settings
from duecast.worker.main import served_sources

USERS = {"name": "users", "table": "users", "id_column": "id", "due_column": "due_at", "period_s": 60}


def _settings(**worker: object) -> Settings:
    return Settings(
        sources=[USERS],  # type: ignore[list-item]
        jobs={"queues": ["default", "mail"]},  # type: ignore[arg-type]
        topics={"names": ["orders"], "groups": [{"topic": "orders", "name": "billing"}]},  # type: ignore[arg-type]
        worker=worker,  # type: ignore[arg-type]
    )


def _warnings(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_a_handler_for_a_source_not_configured_is_left_out_with_one_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    registered = ["users", "ubs_ranges", "jobs", "topics.orders-unknown", "topics.orders-billing"]
    with caplog.at_level(logging.INFO, logger="duecast.worker"):
        served = served_sources(_settings(), registered)
    assert served == ["users", "jobs.default", "jobs.mail", "topics.orders-billing"]
    (warning,) = _warnings(caplog)
    said = warning.getMessage()
    for needle in ("'ubs_ranges'", "not configured", "[[sources]]", "topics.orders-unknown", "topics.groups"):
        assert needle in said
    assert "'users'" not in said
    assert getattr(warning, "event", None) == "worker.unconfigured_sources"
    assert getattr(warning, "sources", None) == ["ubs_ranges", "topics.orders-unknown"]


def test_tasks_with_jobs_disabled_are_left_out_like_a_source_not_configured(
    caplog: pytest.LogCaptureFixture,
) -> None:
    settings = _settings().model_copy(update={"jobs": _settings().jobs.model_copy(update={"enabled": False})})
    with caplog.at_level(logging.WARNING, logger="duecast.worker"):
        assert served_sources(settings, ["jobs", "users"]) == ["users"]
    (warning,) = _warnings(caplog)
    assert "jobs.enabled is false" in warning.getMessage()


def test_every_source_configured_is_served_without_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="duecast.worker"):
        assert served_sources(_settings(), ["jobs", "users"]) == ["jobs.default", "jobs.mail", "users"]
    assert not _warnings(caplog)


def test_a_source_named_on_purpose_must_be_configured() -> None:
    with pytest.raises(StartupError, match=r"handler for source 'ubs_ranges', which is not configured"):
        served_sources(_settings(sources=["users", "ubs_ranges"]), ["users", "ubs_ranges"])
    with pytest.raises(StartupError, match="the app registers no handler for it"):
        served_sources(_settings(sources=["orders"]), ["users"])


def test_an_app_with_nothing_configured_to_serve_ends_the_start_naming_each() -> None:
    with pytest.raises(StartupError) as info:
        served_sources(_settings(), ["ubs_ranges", "user_blok_status"])
    said = str(info.value)
    assert "'ubs_ranges'" in said
    assert "'user_blok_status'" in said
    assert "[[sources]]" in said
