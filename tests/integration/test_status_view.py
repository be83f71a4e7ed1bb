"""`duecast status` and `--watch` against the test database: freshness, rates from the counters'
deltas, job queues by state and the workers running jobs."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator

import pymysql
import pytest

from duecast import cli
from duecast.shared.api.enqueue import Enqueuer
from duecast.shared.fanout.queue import connect_redis
from duecast.shared.settings import MySQLSettings, RedisSettings, Settings
from duecast.shared.states import State
from tests.integration.conftest import Env
from tests.integration.test_cli import cli_env, sources_json, status_row  # noqa: F401 - a fixture

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
    sql.execute(f"DROP TABLE IF EXISTS `{table}`, `{table}_s`")


def test_workers_running_jobs_are_listed(
    jobs_env: Enqueuer, sql: pymysql.cursors.Cursor, capsys: pytest.CaptureFixture[str]
) -> None:
    job_id = jobs_env.enqueue("anything", {"n": 1})
    sql.execute(
        "UPDATE status_jobs SET dc_state = %s, worker = 'box-7:4242', "
        "started_at = NOW(6) - INTERVAL 3 SECOND, lease_until = NOW(6) + INTERVAL 1 MINUTE WHERE id = %s",
        (int(State.RUNNING), job_id),
    )
    capsys.readouterr()
    assert cli.main(["status"]) == 0
    out = capsys.readouterr().out
    line = next(line for line in out.splitlines() if "box-7:4242" in line)
    cells = [c.strip() for c in line.strip("│ ").split("│")]
    assert cells[:3] == ["box-7:4242", "1", "default"]
    assert cells[4] == "live"
