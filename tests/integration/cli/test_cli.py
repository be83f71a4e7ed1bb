"""The `duecast` command line against the test database: migrate, status, and how it fails.

Settings travel as DUECAST_* environment variables, as in production. Commands that install signal
handlers or must prove an exit code run as real subprocesses; the others call duecast.cli.commands.main.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pymysql
import pytest

from duecast import cli
from duecast.shared.entries import Entry
from duecast.shared.settings import MySQLSettings, RedisSettings, SourceSettings
from tests.integration.conftest import Env, source_fields

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[3]
SENTINEL = "pw-SENTINEL-8f3c1e"  # must never appear in any output


def sources_json(*sources: SourceSettings | dict[str, object]) -> str:
    return json.dumps([s.model_dump() if isinstance(s, SourceSettings) else s for s in sources])


@pytest.fixture
def cli_env(
    monkeypatch: pytest.MonkeyPatch, mysql_settings: MySQLSettings, redis_settings: RedisSettings
) -> dict[str, str]:
    """DUECAST_* for the test database and key prefix, jobs off; set in this process and returned
    for subprocesses (add DUECAST_SOURCES)."""
    env = {
        "DUECAST_MYSQL__DATABASE": mysql_settings.database,
        "DUECAST_REDIS__KEY_PREFIX": redis_settings.key_prefix,
        "DUECAST_JOBS__ENABLED": "false",
        "COLUMNS": "200",  # rich wraps tables at 80 columns when not on a terminal
    }
    monkeypatch.delenv("DUECAST_CONFIG", raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return env


def run_cli(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "duecast", *args],
        cwd=ROOT,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def status_row(output: str, source: str) -> dict[str, str]:
    """The status table's cells for `source`, by column title (rich draws the header with ┃)."""
    lines = output.splitlines()
    header = next([c.strip() for c in line.strip("┃ ").split("┃")] for line in lines if "┃" in line)
    for line in lines:
        cells = [c.strip() for c in line.strip("│ ").split("│")]
        if cells[0] == source:
            return dict(zip(header, cells, strict=True))
    raise AssertionError(f"no row for {source} in:\n{output}")


def has_column(sql: pymysql.cursors.Cursor, table: str, column: str) -> bool:
    sql.execute(
        "SELECT COUNT(*) FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() "
        "AND TABLE_NAME = %s AND COLUMN_NAME = %s",
        (table, column),
    )
    return sql.fetchone() == (1,)


def test_migrate_print_shows_the_sql_and_changes_nothing_then_migrate_applies_it(
    cli_env: dict[str, str],
    tables: Callable[..., str],
    sql: pymysql.cursors.Cursor,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    table = tables("rescan", rows=3)
    assert cli.main(["migrate"]) == 0  # the session's shared tables (leases, workers), if first to run
    monkeypatch.setenv(
        "DUECAST_SOURCES", sources_json({"name": "cli", "table": table, **source_fields("rescan")})
    )
    capsys.readouterr()

    assert cli.main(["migrate", "--print"]) == 0
    out = capsys.readouterr().out
    assert f"ALTER TABLE `{table}` ADD COLUMN `dc_state` TINYINT UNSIGNED NOT NULL DEFAULT 0" in out
    assert f"ALTER TABLE `{table}` ADD INDEX `dc_due` (`dc_state`, `updated_time`);" in out
    assert not has_column(sql, table, "dc_state")

    assert cli.main(["migrate"]) == 0
    assert "migrate: 2 step(s) applied" in capsys.readouterr().out
    assert has_column(sql, table, "dc_state")

    assert cli.main(["migrate", "--print"]) == 0
    assert capsys.readouterr().out.strip() == "-- up to date"
    assert cli.main(["migrate"]) == 0
    assert capsys.readouterr().out.strip() == "migrate: up to date"


def test_status_shows_the_source(
    cli_env: dict[str, str],
    make_env: Callable[..., Env],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    env = make_env("rescan", rows=5)
    entries = env.store.claim_due(2)
    env.queue.push(env.source.name, entries)
    env.queue.add_stats(env.source.name, {"acked": 7, "requeued": 1})
    monkeypatch.setenv("DUECAST_SOURCES", sources_json(env.source))

    assert cli.main(["status"]) == 0

    row = status_row(capsys.readouterr().out, env.source.name)
    assert (row["due"], row["in flight"], row["in Redis"]) == ("3", "2", "2")
    assert (row["acked"], row["requeued"], row["bad"]) == ("7", "1", "0")
    age = float(row["oldest due age"].rstrip("s"))
    assert 3590 <= age < 3600  # checked an hour ago, period 10 s


def test_the_console_script_runs_status_in_its_own_process(
    cli_env: dict[str, str], make_env: Callable[..., Env]
) -> None:
    env = make_env("oneoff", rows=4)
    assert env.store.claim_due(1) == [Entry(1, 1)]

    done = run_cli(["status"], {**cli_env, "DUECAST_SOURCES": sources_json(env.source)})

    assert done.returncode == 0, done.stderr
    row = status_row(done.stdout, env.source.name)
    assert (row["due"], row["in flight"]) == ("3", "1")


def test_status_before_migrate_says_to_run_migrate(
    cli_env: dict[str, str],
    tables: Callable[..., str],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    table = tables("oneoff")
    monkeypatch.setenv(
        "DUECAST_SOURCES", sources_json({"name": "cli", "table": table, **source_fields("oneoff")})
    )

    assert cli.main(["status"]) == 2

    err = capsys.readouterr().err
    assert f"source cli: table {table} lacks duecast's dispatch columns" in err
    assert "run `duecast migrate`" in err


def test_worker_without_an_app_exits_with_a_clear_message(
    cli_env: dict[str, str], make_env: Callable[..., Env]
) -> None:
    env = make_env("rescan")

    done = run_cli(["worker"], {**cli_env, "DUECAST_SOURCES": sources_json(env.source)})

    assert done.returncode == 2
    assert "duecast worker: no app given; pass --app package.module or set worker.app" in done.stderr
    assert "Traceback" not in done.stderr


BAD_SETTINGS = {
    "sql-in-a-table-name": (
        {
            "DUECAST_SOURCES": sources_json(
                {"name": "x", "table": "x; DROP TABLE y", "due_column": "d", "period_s": 10}
            )
        },
        "sources.0.table",
    ),
    "port-not-a-number": ({"DUECAST_MYSQL__PORT": "three-three-oh-six"}, "mysql.port"),
    "unknown-mysql-key": ({"DUECAST_MYSQL__PASSWROD": "typo"}, "passwrod"),
    "touch-without-period": (
        {"DUECAST_SOURCES": sources_json({"name": "x", "table": "x", "due_column": "d"})},
        "on_success='touch' with period_s=0",
    ),
    "bad-key-prefix": ({"DUECAST_REDIS__KEY_PREFIX": "has spaces"}, "redis.key_prefix"),
}


SECRETS = {
    "DUECAST_MYSQL__PASSWORD": SENTINEL,
    "DUECAST_REDIS__URL": f"redis://:{SENTINEL}@127.0.0.1:6379/0",
}


@pytest.mark.parametrize("command", [["status"], ["migrate", "--print"]])
@pytest.mark.parametrize("case", BAD_SETTINGS.values(), ids=BAD_SETTINGS.keys())
def test_invalid_settings_exit_2_naming_the_field_and_never_the_password(
    cli_env: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    command: list[str],
    case: tuple[dict[str, str], str],
) -> None:
    bad, names = case
    for name, value in {**SECRETS, **bad}.items():
        monkeypatch.setenv(name, value)

    assert cli.main(command) == 2

    out, err = capsys.readouterr()
    assert "invalid settings" in err
    assert names in err
    assert SENTINEL not in out + err


@pytest.mark.parametrize(
    "command",
    [["status"], ["worker", "--app", "tests.integration.apps"], ["dispatcher"]],
    ids=["status", "worker", "dispatcher"],
)
def test_invalid_settings_end_the_process_with_exit_code_2(
    cli_env: dict[str, str], command: list[str]
) -> None:
    bad, names = BAD_SETTINGS["sql-in-a-table-name"]

    done = run_cli(command, {**cli_env, **SECRETS, **bad})

    assert done.returncode == 2, done.stderr
    assert "invalid settings" in done.stderr
    assert names in done.stderr
    assert SENTINEL not in done.stdout + done.stderr


def test_malformed_json_settings_exit_2_with_a_clear_message(cli_env: dict[str, str]) -> None:
    done = run_cli(
        ["status"], {**cli_env, "DUECAST_MYSQL__PASSWORD": SENTINEL, "DUECAST_SOURCES": '[{"name": '}
    )

    assert SENTINEL not in done.stdout + done.stderr
    assert done.returncode == 2
    assert "invalid settings" in done.stderr
    assert "sources" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize(
    "unreachable",
    [
        {"DUECAST_MYSQL__PORT": "1", "DUECAST_MYSQL__CONNECT_TIMEOUT_S": "2"},
        {"DUECAST_REDIS__URL": f"redis://:{SENTINEL}@127.0.0.1:1/0", "DUECAST_REDIS__SOCKET_TIMEOUT_S": "2"},
    ],
    ids=["mysql", "redis"],
)
def test_an_unreachable_server_fails_without_printing_secrets(
    cli_env: dict[str, str], make_env: Callable[..., Env], unreachable: dict[str, str]
) -> None:
    env = make_env("rescan")
    settings = {
        "DUECAST_MYSQL__PASSWORD": SENTINEL,
        "DUECAST_SOURCES": sources_json(env.source),
        **unreachable,
    }
    if "DUECAST_MYSQL__PORT" not in unreachable:
        settings.pop("DUECAST_MYSQL__PASSWORD")  # MySQL must answer here: keep the real (empty) one

    done = run_cli(["status"], {**cli_env, **settings})

    assert done.returncode != 0
    assert "Connection refused" in done.stderr or "connecting to 127.0.0.1:1" in done.stderr
    assert SENTINEL not in done.stdout + done.stderr
