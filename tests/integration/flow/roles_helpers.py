"""Helpers the role tests share: settings wired to tests.integration.apps, and drain-mode role runs."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable
from typing import Any

from duecast.dispatcher import main as dispatcher_main
from duecast.shared.settings import DispatcherSettings, Settings, WorkerSettings
from duecast.worker import main as worker_main
from duecast.worker.worker import Worker
from tests.integration import apps
from tests.integration.conftest import Env

MakeEnv = Callable[..., Env]
IDLE, DISPATCHED = 0, 1
APP = "tests.integration.apps:handlers"


def role_settings(env: Env, worker: dict[str, Any] | None = None, **dispatcher: Any) -> Settings:
    """The env's settings with this app, short idle waits (drain exits fast) and quick error backoff."""
    return env.settings.model_copy(
        update={
            "worker": WorkerSettings(
                **{
                    "app": APP,
                    "sources": [s.name for s in env.settings.all_sources()],
                    "block_timeout_s": 0.1,
                    "error_backoff_s": 0.05,
                    **(worker or {}),
                }
            ),
            "dispatcher": DispatcherSettings(**{"poll_interval_s": 0.05, **dispatcher}),
        }
    )


def dispatch(settings: Settings) -> None:
    dispatcher_main.serve(settings, threading.Event(), drain=True)


def work(settings: Settings) -> Worker:
    return worker_main.serve(settings, threading.Event(), drain=True)


def sweep(settings: Settings) -> None:
    dispatcher_main.serve_sweeper(settings, threading.Event(), once=True)


def handled_once(recorder: apps.Recorder, source: str, ids: range) -> None:
    runs = recorder.executions(source)
    assert runs == Counter({i: 1 for i in ids}), {i: n for i, n in runs.items() if n != 1}
