"""A source or queue no live worker serves is named in `duecast status`; one worker serves several
apps (`--app a --app b`), and once it runs nothing is reported."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable

import pymysql
import pytest

from duecast.cli.status import StatusReader, as_json
from duecast.dispatcher.main import serve as serve_dispatcher
from duecast.shared.api.enqueue import Enqueuer
from duecast.shared.fanout.client import connect_redis
from duecast.shared.settings import Settings
from duecast.shared.storage.admin import migrate
from duecast.shared.storage.db import Database
from duecast.shared.storage.worker_registry import WorkerRegistry
from duecast.worker.main import main as worker_main
from duecast.worker.main import serve as serve_worker
from tests.integration import apps, jobs_app
from tests.integration.conftest import Env
from tests.integration.polling import wait_until

pytestmark = pytest.mark.integration

BOTH_APPS = "tests.integration.apps,tests.integration.jobs_app"


def test_status_names_what_no_worker_serves_until_one_worker_serves_two_apps(
    make_env: Callable[..., Env], sql: pymysql.cursors.Cursor
) -> None:
    env = make_env("rescan", rows=5, name=apps.RESCAN)
    table = f"jobs_{uuid.uuid4().hex[:8]}"
    settings = env.settings.model_copy(
        update={
            "jobs": env.settings.jobs.model_copy(
                update={"enabled": True, "table": table, "schedules_table": f"{table}_s"}
            ),
            "worker": env.settings.worker.model_copy(
                update={"app": BOTH_APPS, "sources": [apps.RESCAN, "jobs"], "block_timeout_s": 0.1}
            ),
        }
    )
    migrate.apply(settings)
    apps.RECORDER.reset()
    jobs_app.RUNS.clear()
    stop = threading.Event()
    worker = threading.Thread(target=serve_worker, args=(settings, stop), daemon=True)
    try:
        reader = StatusReader(settings)
        assert as_json(reader.frame(), reader.history)["unserved"] == [apps.RESCAN, "jobs.default"]

        Enqueuer(settings, connect_redis(settings.redis)).enqueue("record", "from the second app")
        serve_dispatcher(settings, threading.Event(), drain=True)
        worker.start()
        registry = WorkerRegistry(Database(settings.mysql), settings.worker)
        wait_until(registry.alive, "the worker to register")
        wait_until(lambda: jobs_app.runs_of("from the second app") == 1, "the second app's task")
        wait_until(lambda: len(apps.RECORDER.executions(apps.RESCAN)) == 5, "the first app's rows")

        (me,) = registry.alive()
        assert me.sources.split(",") == [apps.RESCAN, "jobs.default"]
        assert {"record", "remember"} <= (me.tasks or set())
        assert as_json(reader.frame(), reader.history)["unserved"] == []
    finally:
        stop.set()
        worker.join(15)
        sql.execute(f"DROP TABLE IF EXISTS `{table}`, `{table}_s`, `{table}_runs`, `{table}_cursors`")


def test_worker_app_can_be_given_several_times(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[Settings] = []
    monkeypatch.setattr("duecast.worker.main.serve", lambda settings, *_a, **_kw: seen.append(settings))

    assert worker_main(["--app", "tests.integration.apps", "--app", "tests.integration.jobs_app"]) == 0

    assert seen[0].worker.app == BOTH_APPS
