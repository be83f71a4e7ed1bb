"""Every role and command ends a start-up failure with one line on stderr naming the setting or server
and what to do, and the exit code docs/runbook.md#exit-codes documents; no traceback.

Each case runs the real command as a subprocess, as a user would type it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pymysql
import pytest

from duecast.shared.process.failures import EXIT_CONFIG, EXIT_UNAVAILABLE
from duecast.shared.settings import MySQLSettings, RedisSettings, Settings
from duecast.shared.storage.admin import migrate
from tests.integration.cli.test_cli import ROOT, sources_json
from tests.integration.conftest import Env

pytestmark = pytest.mark.integration

# Every command a user runs; each must fail the same way when its servers or settings are wrong.
COMMANDS = {
    "status": ["-m", "duecast", "status"],
    "dispatcher": ["-m", "duecast", "dispatcher"],
    "worker": ["-m", "duecast", "worker", "--app", "tests.integration.jobs_app"],
    "python -m duecast.worker": ["-m", "duecast.worker", "--app", "tests.integration.jobs_app"],
    "python -m duecast.dispatcher": ["-m", "duecast.dispatcher"],
    "enqueue": ["-m", "duecast", "enqueue", "send", "--payload", "{}"],
    "jobs": ["-m", "duecast", "jobs", "list"],
    "web": ["-m", "duecast", "web", "--port", "0"],
    "migrate": ["-m", "duecast", "migrate"],
    "sweeper": ["-m", "duecast", "sweeper", "--once"],
}
# Commands that stop on their own settings before any server: checked for settings errors only.
# (The demo creates its database, so it never runs here against an unknown one.)
SETTINGS_ONLY = {
    "topics": ["-m", "duecast", "topics", "status"],
    "demo": ["-m", "duecast", "demo", "--seconds", "1"],
}
# Commands that need Redis at start-up. web keeps serving while Redis is down, enqueue's wake-up is a
# hint (MySQL holds the job), migrate never uses it.
REDIS_COMMANDS = ["status", "dispatcher", "worker", "python -m duecast.worker"]


def run(args: list[str], env: dict[str, str], cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("DUECAST_") or k == "DUECAST_DEV"}
    # The servers' address comes from the environment the suite runs in; each case overrides a part.
    # Not its database or key prefix (scripts/dev exports them): a case without them means defaults.
    servers = {
        k: v
        for k, v in os.environ.items()
        if k.startswith(("DUECAST_MYSQL__", "DUECAST_REDIS__"))
        and k not in ("DUECAST_MYSQL__DATABASE", "DUECAST_REDIS__KEY_PREFIX")
    }
    return subprocess.run(
        [sys.executable, *args],
        cwd=cwd,
        env={**clean, **servers, "PYTHONPATH": str(ROOT), **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def assert_one_line(done: subprocess.CompletedProcess[str], code: int, *needles: str) -> str:
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert done.returncode == code, done.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]
    assert "Traceback" not in done.stdout + done.stderr
    return lines[0]


@pytest.fixture
def source_env(
    mysql_settings: MySQLSettings, redis_settings: RedisSettings, sql: pymysql.cursors.Cursor
) -> Iterator[dict[str, str]]:
    """Settings for a jobs table of this test's own in the test database, migrated."""
    table = f"jobs_{uuid.uuid4().hex[:8]}"
    jobs = {"table": table, "schedules_table": f"{table}_s"}
    migrate.apply(Settings(mysql=mysql_settings, redis=redis_settings, jobs=jobs))  # type: ignore[arg-type]
    yield {
        "DUECAST_MYSQL__DATABASE": mysql_settings.database,
        "DUECAST_REDIS__KEY_PREFIX": redis_settings.key_prefix,
        "DUECAST_JOBS__TABLE": table,
        "DUECAST_JOBS__SCHEDULES_TABLE": f"{table}_s",
    }
    sql.execute(f"DROP TABLE IF EXISTS `{table}`, `{table}_s`, `{table}_runs`, `{table}_cursors`")


def database_exists(sql: pymysql.cursors.Cursor, name: str) -> bool:
    sql.execute("SELECT COUNT(*) FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = %s", (name,))
    return sql.fetchone() == (1,)


@pytest.mark.parametrize("command", [c for c in COMMANDS if c != "migrate"])
def test_no_config_at_all_names_mysql_database_and_the_settings_file(
    command: str, sql: pymysql.cursors.Cursor, tmp_path: Path
) -> None:
    if database_exists(sql, "duecast"):
        pytest.skip("a database named duecast exists on this server: the default settings would work")

    done = run(COMMANDS[command], {}, cwd=tmp_path)

    line = assert_one_line(done, EXIT_CONFIG, "database 'duecast'", "mysql.database", "DUECAST_CONFIG")
    assert line.startswith("duecast ")


@pytest.mark.parametrize("command", [c for c in COMMANDS if c != "migrate"])
def test_a_missing_database_names_it_and_says_what_to_do(
    command: str, sql: pymysql.cursors.Cursor, tmp_path: Path
) -> None:
    missing = f"duecast_missing_{uuid.uuid4().hex[:8]}"
    assert not database_exists(sql, missing)

    done = run(COMMANDS[command], {"DUECAST_MYSQL__DATABASE": missing}, cwd=tmp_path)

    assert_one_line(done, EXIT_CONFIG, f"database {missing!r}", "does not exist", "duecast migrate")


@pytest.mark.parametrize("command", COMMANDS)
def test_mysql_refusing_connections_is_one_line_and_exit_3(command: str, tmp_path: Path) -> None:
    done = run(
        COMMANDS[command],
        {"DUECAST_MYSQL__PORT": "1", "DUECAST_MYSQL__CONNECT_TIMEOUT_S": "2"},
        cwd=tmp_path,
    )

    assert_one_line(done, EXIT_UNAVAILABLE, "MySQL 127.0.0.1:1", "mysql.host / mysql.port")


@pytest.mark.parametrize("command", REDIS_COMMANDS)
def test_a_wrong_redis_port_is_one_line_and_exit_3(command: str, source_env: dict[str, str]) -> None:
    done = run(COMMANDS[command], {**source_env, "DUECAST_REDIS__URL": "redis://127.0.0.1:1/0"})

    assert_one_line(done, EXIT_UNAVAILABLE, "127.0.0.1:1", "redis.url")


def test_a_handler_for_a_source_that_is_not_configured_names_it(
    source_env: dict[str, str], tmp_path: Path
) -> None:
    (tmp_path / "typo_app.py").write_text(
        "from duecast import Registry\n"
        "handlers = Registry()\n"
        "@handlers.row('user_blok_status')\n"
        "def check(row):\n"
        "    return None\n"
    )
    env = {**source_env, "DUECAST_JOBS__ENABLED": "false", "PYTHONPATH": f"{ROOT}{os.pathsep}{tmp_path}"}

    for args in (["-m", "duecast", "worker"], ["-m", "duecast.worker"]):
        done = run([*args, "--app", "typo_app"], env)
        assert_one_line(done, EXIT_CONFIG, "'user_blok_status'", "not configured", "[[sources]]")


def test_the_worker_without_an_app_names_the_setting(source_env: dict[str, str]) -> None:
    done = run(["-m", "duecast", "worker"], source_env)

    assert_one_line(done, EXIT_CONFIG, "--app", "worker.app")


@pytest.mark.parametrize("command", [*COMMANDS, *SETTINGS_ONLY])
def test_a_broken_toml_file_names_the_file_and_the_spot(command: str, tmp_path: Path) -> None:
    config = tmp_path / "duecast.toml"
    config.write_text("[mysql\nport = 3306\n")

    done = run({**COMMANDS, **SETTINGS_ONLY}[command], {"DUECAST_CONFIG": str(config)}, cwd=tmp_path)

    assert_one_line(done, EXIT_CONFIG, str(config), "not valid TOML", "line 1")


@pytest.mark.parametrize("command", ["status", "dispatcher", "worker", "migrate", "topics", "demo"])
def test_invalid_settings_are_one_line_naming_every_field(command: str, tmp_path: Path) -> None:
    env = {"DUECAST_MYSQL__PORT": "three", "DUECAST_REDIS__KEY_PREFIX": "has spaces"}

    done = run({**COMMANDS, **SETTINGS_ONLY}[command], env, cwd=tmp_path)

    assert_one_line(done, EXIT_CONFIG, "invalid settings", "mysql.port", "redis.key_prefix")


def test_a_handler_column_the_table_lacks_names_source_and_column(
    make_env: Callable[..., Env], tmp_path: Path
) -> None:
    env = make_env("rescan", rows=3)
    (tmp_path / "columns_app.py").write_text(
        "from duecast import Registry\n"
        "handlers = Registry()\n"
        f"@handlers.row({env.source.name!r}, columns=['status', 'statuz'])\n"
        "def check(row):\n"
        "    return None\n"
    )
    settings = {
        "DUECAST_MYSQL__DATABASE": env.settings.mysql.database,
        "DUECAST_REDIS__KEY_PREFIX": env.settings.redis.key_prefix,
        "DUECAST_SOURCES": sources_json(env.source),
        "DUECAST_JOBS__ENABLED": "false",
        "PYTHONPATH": f"{ROOT}{os.pathsep}{tmp_path}",
    }

    done = run(["-m", "duecast", "worker", "--app", "columns_app", "--drain"], settings)

    assert_one_line(
        done, EXIT_CONFIG, f"source {env.source.name!r}", "column(s) statuz,", env.table, "columns="
    )
