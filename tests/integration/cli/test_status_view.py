"""`duecast status` and `--watch` against the test database: freshness, rates from the counters'
deltas, job queues by state and the workers running jobs."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator

import pymysql
import pytest
from rich.console import Console

from duecast import cli
from duecast.cli.status import StatusReader, view
from duecast.shared.api.enqueue import Enqueuer, Job
from duecast.shared.fanout.client import connect_redis
from duecast.shared.process.failures import EXIT_UNAVAILABLE
from duecast.shared.settings import MySQLSettings, RedisSettings, Settings
from duecast.shared.states import State
from duecast.shared.storage.db import Database
from tests.integration import apps
from tests.integration.cli.test_cli import cli_env, run_cli, sources_json, status_row  # noqa: F401 - a fixture
from tests.integration.conftest import Env
from tests.integration.flow.roles_helpers import dispatch, role_settings, work

pytestmark = pytest.mark.integration


def test_status_shows_freshness_of_a_rescan_source(
    cli_env: dict[str, str],  # noqa: F811
    make_env: Callable[..., Env],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    env = make_env("rescan", rows=4)
    env.sql.execute(f"UPDATE `{env.table}` SET updated_time = NOW(6) WHERE user_id = 1")
    monkeypatch.setenv("DUECAST_SOURCES", sources_json(env.source))

    assert cli.main(["status"]) == 0

    out = capsys.readouterr().out
    row = status_row(out, env.source.name)
    assert row["fresh"] == "25.0%"
    assert 3600 <= float(row["worst staleness"].rstrip("s")) < 3610
    assert row["checks/s"] == "-"
    assert "rates need two readings" in out


def test_watch_refreshes_and_shows_rates_from_the_counters(
    cli_env: dict[str, str],  # noqa: F811
    make_env: Callable[..., Env],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    env = make_env("rescan", rows=4)
    monkeypatch.setenv("DUECAST_SOURCES", sources_json(env.source))
    done = threading.Event()

    def checks() -> None:  # acks keep arriving while status watches
        while not done.wait(0.02):
            env.queue.add_stats(env.source.name, {"acked": 10})

    feeder = threading.Thread(target=checks, daemon=True)
    feeder.start()
    try:
        assert cli.main(["status", "--watch", "--interval", "0.2", "--count", "3"]) == 0
    finally:
        done.set()
        feeder.join()

    out = capsys.readouterr().out
    rate = status_row(out, env.source.name)["checks/s"]
    assert rate.endswith("/s")
    assert float(rate.removesuffix("/s").replace(",", "")) > 0
    assert "rates need two readings" not in out


@pytest.fixture
def jobs_env(
    mysql_settings: MySQLSettings,
    redis_settings: RedisSettings,
    sql: pymysql.cursors.Cursor,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[Enqueuer]:
    table = "status_jobs"
    for name, value in {
        "DUECAST_MYSQL__DATABASE": mysql_settings.database,
        "DUECAST_REDIS__KEY_PREFIX": redis_settings.key_prefix,
        "DUECAST_JOBS__TABLE": table,
        "DUECAST_JOBS__SCHEDULES_TABLE": f"{table}_s",
        "COLUMNS": "200",
    }.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("DUECAST_CONFIG", raising=False)
    monkeypatch.delenv("DUECAST_SOURCES", raising=False)
    assert cli.main(["migrate"]) == 0
    settings = Settings(mysql=mysql_settings, redis=redis_settings, jobs={"table": table})  # type: ignore[arg-type]
    yield Enqueuer(settings, connect_redis(redis_settings))
    sql.execute(f"DROP TABLE IF EXISTS `{table}`, `{table}_s`, `{table}_runs`, `{table}_cursors`")


def test_workers_running_jobs_are_listed(
    jobs_env: Enqueuer, sql: pymysql.cursors.Cursor, capsys: pytest.CaptureFixture[str]
) -> None:
    job_id = jobs_env.enqueue("anything", {"n": 1})
    # Its run, started by worker box-7:4242 three seconds ago (a run's job row is not written).
    sql.execute(
        "INSERT INTO status_jobs_runs (queue, priority, jobs, members, dc_state, dc_attempt, worker, "
        "started_at, lease_until) VALUES ('default', 0, 1, %s, %s, 1, 'box-7:4242', "
        "NOW(6) - INTERVAL 3 SECOND, NOW(6) + INTERVAL 1 MINUTE)",
        (str(job_id), int(State.RUNNING)),
    )
    capsys.readouterr()
    assert cli.main(["status"]) == 0
    out = capsys.readouterr().out
    line = next(line for line in out.splitlines() if "box-7:4242" in line)
    cells = [c.strip() for c in line.strip("│ ").split("│")]
    assert cells[:3] == ["box-7:4242", "1", "default"]
    assert cells[4] == "live"


@pytest.fixture
def busy_source(cli_env: dict[str, str], make_env: Callable[..., Env]) -> Env:  # noqa: F811
    """A re-scan source with a long name, thousands of rows, some in flight and in Redis."""
    env = make_env("rescan", rows=2500, name="user_block_status_eu_west")
    env.queue.push(env.source.name, env.store.claim_due(1200))
    env.queue.add_stats(env.source.name, {"acked": 1_234_567, "requeued": 12_345})
    return env


def test_status_at_80_columns_cuts_no_cell(busy_source: Env, cli_env: dict[str, str]) -> None:  # noqa: F811
    piped = {**cli_env, "COLUMNS": "80", "DUECAST_SOURCES": sources_json(busy_source.source)}

    done = run_cli(["status"], piped)

    assert done.returncode == 0, done.stderr
    assert "…" not in done.stdout
    assert max(len(line) for line in done.stdout.splitlines()) <= 80
    for shown in ("user_block_status_eu_west", "1,300", "1,200", "1,234,567", "12,345", "worst staleness"):
        assert shown in done.stdout


def test_status_json_is_for_scripts(busy_source: Env, cli_env: dict[str, str]) -> None:  # noqa: F811
    done = run_cli(["status", "--json"], {**cli_env, "DUECAST_SOURCES": sources_json(busy_source.source)})

    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    (source,) = doc["sources"]
    assert source["name"] == "user_block_status_eu_west"
    assert (source["due"], source["in_flight"], source["in_redis"]) == (1300, 1200, 1200)
    assert source["counters"]["acked"] == 1_234_567
    assert source["fresh_share"] == 0.0
    assert 3600 <= source["worst_staleness_s"] < 3610
    assert doc["unavailable"] == []
    assert doc["workers_alive"] == []


def test_status_answers_from_redis_while_mysql_refuses(
    busy_source: Env,
    cli_env: dict[str, str],  # noqa: F811
) -> None:
    refused = {
        **cli_env,
        "COLUMNS": "80",
        "DUECAST_SOURCES": sources_json(busy_source.source),
        "DUECAST_MYSQL__PORT": "1",
    }

    done = run_cli(["status"], refused)
    as_json = run_cli(["status", "--json"], refused)

    assert done.returncode == EXIT_UNAVAILABLE
    (line,) = done.stderr.splitlines()
    assert line.startswith("duecast status: MySQL 127.0.0.1:1")
    assert "Traceback" not in done.stdout
    assert "Redis only" in done.stdout
    assert "1,200" in done.stdout
    assert "1,234,567" in done.stdout
    assert as_json.returncode == EXIT_UNAVAILABLE
    doc = json.loads(as_json.stdout)
    assert doc["sources"] == [
        {
            "name": busy_source.source.name,
            "in_redis": 1200,
            "counters": {"acked": 1_234_567, "requeued": 12_345},
        }
    ]
    assert doc["unavailable"] == [line.removeprefix("duecast status: ")]


def test_a_watch_keeps_its_last_reading_when_mysql_stops_answering(busy_source: Env) -> None:
    reader = StatusReader(busy_source.settings)
    first = reader.frame()
    assert first.reading is not None
    assert first.problems == []
    # MySQL now refuses every new connection (its port closed); the old ones are gone too.
    refused = Database(busy_source.settings.mysql.model_copy(update={"port": 1, "connect_timeout_s": 2}))
    assert reader.sampler is not None
    for store in reader.sampler.stores:
        store.db = refused  # type: ignore[misc]
    reader.dashboard.db = reader.registry.db = refused

    later = reader.frame()

    assert later.reading is first.reading
    assert later.stale_since == first.reading.at
    assert later.live is None  # the workers registry is in MySQL too
    (problem,) = later.problems
    assert problem.startswith("MySQL 127.0.0.1:1")
    assert "mysql.host / mysql.port" in problem
    console = Console(width=80, record=True)
    console.print(view(later, reader.history, console, None))
    text = console.export_text()
    assert "sources and queues as read at" in text
    assert f"cannot read: {problem[:40]}" in text
    assert "user_block_status_eu_west" in text


def test_job_queues_at_80_columns_cut_no_cell(
    jobs_env: Enqueuer, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    jobs_env.enqueue_many(Job("anything", i) for i in range(2_345))
    monkeypatch.setenv("COLUMNS", "80")
    capsys.readouterr()

    assert cli.main(["status"]) == 0

    out = capsys.readouterr().out
    assert "…" not in out
    assert max(len(line) for line in out.splitlines()) <= 80
    assert "job queues (1/2)" in out
    for header in ("queue", "pending", "scheduled", "dispatched", "oldest due age", "finished/s"):
        assert header in out
    assert out.count("2,345") == 2  # pending and due, whole


def test_a_source_whose_checks_all_fail_shows_it_beside_its_freshness(
    cli_env: dict[str, str],  # noqa: F811
    make_env: Callable[..., Env],
    recorder: apps.Recorder,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Issue 26.7: a failed check sets the row's due column (its next check waits a period), so
    every row reads checked: before, a source failing 100% read 100% fresh and nothing beside it."""
    env = make_env("rescan", rows=20, name=apps.RESCAN)
    recorder.fail_once.update(range(1, 21))  # every row's first attempt fails
    settings = role_settings(env)
    dispatch(settings)
    work(settings)
    assert sum(recorder.executions(apps.RESCAN).values()) == 20
    monkeypatch.setenv("DUECAST_SOURCES", sources_json(env.source))

    assert cli.main(["status"]) == 0
    out = capsys.readouterr().out
    row = status_row(out, apps.RESCAN)
    assert (row["fresh"], row["failing"], row["failed"], row["acked"]) == ("100.0%", "100.0%", "20", "0")
    assert "failed checks included; failing: checks that failed, since the counters began" in " ".join(
        out.split()
    )
    assert cli.main(["status", "--json"]) == 0
    (doc,) = json.loads(capsys.readouterr().out)["sources"]
    assert (doc["fresh_share"], doc["failed_share"]) == (1.0, 1.0)
