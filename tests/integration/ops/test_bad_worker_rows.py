"""One malformed row in the worker registry (the worker account can write any `tasks`) is skipped and
reported, never a crash: `duecast status`, `duecast enqueue`'s task check, the dashboard's `/` and
`/workers`, and the leader's coverage duty all carry on (issue 25.4)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator

import pytest
from rich.console import Console

from duecast.cli.status import StatusReader, as_json, view
from duecast.dispatcher.coverage import Coverage
from duecast.shared.settings import Settings, WorkerSettings
from duecast.shared.storage import worker_registry
from duecast.shared.storage.db import Database
from duecast.shared.storage.schema import workers_table_ddl
from duecast.shared.storage.worker_registry import WorkerRegistry
from tests.integration.conftest import Env
from tests.integration.ops.web_helpers import Web

pytestmark = pytest.mark.integration

# What the worker account can write in `tasks` (MEDIUMTEXT): not JSON, JSON of another shape.
BAD_TASKS = ["not json at all", '{"send": 1}', "[1, 2]", "[" * 5000]


def insert_bad_rows(env_sql: object, table: str) -> None:
    for n, tasks in enumerate(BAD_TASKS):
        env_sql.execute(  # type: ignore[attr-defined]
            f"INSERT INTO `{table}` (name, host, pid, sources, tasks, started_at, heartbeat_at) "
            "VALUES (%s, 'h', 1, 'jobs.default', %s, NOW(6), NOW(6))",
            (f"bad-{n}", tasks),
        )


@pytest.fixture
def registry(make_env: Callable[..., Env]) -> Iterator[tuple[Env, WorkerRegistry]]:
    env = make_env("rescan", rows=1)
    settings = WorkerSettings(registry_table=f"workers_{env.table[-8:]}")
    env.sql.execute(workers_table_ddl(settings.registry_table))
    reg = WorkerRegistry(Database(env.settings.mysql), settings)
    worker_registry._warned.clear()
    yield env, reg
    reg.db.close()
    env.sql.execute(f"DROP TABLE IF EXISTS `{settings.registry_table}`")


def test_bad_rows_are_skipped_reported_once_and_the_good_ones_still_read(
    registry: tuple[Env, WorkerRegistry], caplog: pytest.LogCaptureFixture
) -> None:
    env, reg = registry
    reg.register("good", ["jobs.default"], ["send"])
    insert_bad_rows(env.sql, reg.settings.registry_table)
    with caplog.at_level(logging.WARNING, "duecast.workers"):
        assert [w.name for w in reg.alive()] == ["good"]
        assert reg.served_tasks() == {"jobs.default": frozenset({"send"})}  # enqueue's task check
        Coverage(reg, ["jobs.default", env.source.name], grace_s=0).check()  # the leader's duty
    assert len(reg.bad_rows) == len(BAD_TASKS)
    assert "'bad-0': tasks is not JSON" in reg.bad_rows
    assert "'bad-2': tasks is not a JSON list of task names" in reg.bad_rows
    warned = [r for r in caplog.records if getattr(r, "event", None) == "workers.bad_rows"]
    assert len(warned) == 1  # rate-limited: three reads, one line
    assert "4 malformed worker registry row(s) skipped" in warned[0].getMessage()


def test_status_shows_the_skipped_rows_and_exits_ok(
    registry: tuple[Env, WorkerRegistry],
) -> None:
    env, reg = registry
    insert_bad_rows(env.sql, reg.settings.registry_table)
    settings: Settings = env.settings.model_copy(update={"worker": reg.settings})
    reader = StatusReader(settings)
    frame = reader.frame()
    assert frame.problems == []
    assert frame.live == []
    doc = as_json(frame, reader.history)
    assert len(doc["workers_malformed"]) == len(BAD_TASKS)
    console = Console(width=200, record=True)
    console.print(view(frame, reader.history, console, None))
    assert "4 malformed worker registry row(s) skipped" in console.export_text()


def test_the_dashboard_pages_show_the_skipped_rows(web: Web) -> None:
    table = web.settings.worker.registry_table
    insert_bad_rows(web.sql, table)
    try:
        for page in ("/", "/workers"):
            response = web.client.get(page)
            assert response.status_code == 200, page
            assert "malformed worker registry row(s) skipped" in response.get_data(as_text=True), page
    finally:
        web.sql.execute(f"DELETE FROM `{table}` WHERE name LIKE 'bad-%%'")
