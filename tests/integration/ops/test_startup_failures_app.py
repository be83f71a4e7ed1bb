"""A user's own mistakes (issue 26, items 1-4) end in one line naming what to fix, the exit code
docs/runbook.md#exit-codes documents, and no traceback: a table not migrated, an app that cannot
be imported (also under --supervise, which must exit instead of restarting it), an app whose
Registry is not where --app looks, a range source not migrated or a handler column its table lacks.

Each case runs the real command as a subprocess, as a user would type it (test_startup_failures.py
covers settings and servers the same way).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pymysql
import pytest

from duecast.shared.process.failures import EXIT_CONFIG, EXIT_OK
from duecast.shared.settings import MySQLSettings, RedisSettings, Settings, SourceSettings
from duecast.shared.storage.admin import migrate
from tests.integration.cli.test_cli import ROOT, sources_json
from tests.integration.ops.test_startup_failures import assert_one_line, run, source_env  # noqa: F401

pytestmark = pytest.mark.integration

JOBS_COMMANDS = {
    "jobs list": ["-m", "duecast", "jobs", "list"],
    "jobs show": ["-m", "duecast", "jobs", "show", "1"],
    "jobs retry": ["-m", "duecast", "jobs", "retry", "1"],
    "enqueue": ["-m", "duecast", "enqueue", "send", "--payload", "{}", "--no-check"],
    "enqueue (checked)": ["-m", "duecast", "enqueue", "send", "--payload", "{}"],
}
BROKEN_APPS = {
    "syntax error": ("x = (\n", ["has a syntax error at", ".py:1", "was never closed"]),
    "raises at import": (
        "import os\nKEY = os.environ['NO_SUCH_KEY_FOR_DUECAST']\n",
        ["raised KeyError", "NO_SUCH_KEY_FOR_DUECAST", ".py:2"],
    ),
    "missing dependency": ("import no_such_dep_xyz\n", ["cannot import the app module", "no_such_dep_xyz"]),
    "no registry": ("x = 1\n", ["holds no duecast Registry"]),
}


@pytest.mark.parametrize("command", JOBS_COMMANDS)
def test_jobs_commands_without_the_jobs_table_name_duecast_migrate(
    command: str, mysql_settings: MySQLSettings, redis_settings: RedisSettings
) -> None:
    table = f"never_migrated_{uuid.uuid4().hex[:8]}"
    env = {
        "DUECAST_MYSQL__DATABASE": mysql_settings.database,
        "DUECAST_REDIS__KEY_PREFIX": redis_settings.key_prefix,
        "DUECAST_JOBS__TABLE": table,
        "DUECAST_WORKER__REGISTRY_TABLE": f"{table}_workers",
    }

    done = run(JOBS_COMMANDS[command], env)

    assert_one_line(done, EXIT_CONFIG, "duecast migrate")


def _app(tmp_path: Path, source: str) -> tuple[str, dict[str, str]]:
    """A module of the user's own, importable from tmp_path: its name and the PYTHONPATH for it."""
    name = f"user_app_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text(source)
    return name, {"PYTHONPATH": f"{ROOT}{os.pathsep}{tmp_path}"}


@pytest.mark.parametrize("case", BROKEN_APPS)
@pytest.mark.parametrize("supervise", [False, True], ids=["worker", "worker --supervise"])
def test_an_app_that_cannot_be_loaded_is_one_line_and_exit_2(
    case: str, supervise: bool, source_env: dict[str, str], tmp_path: Path  # noqa: F811
) -> None:
    source, needles = BROKEN_APPS[case]
    name, path = _app(tmp_path, source)
    args = ["-m", "duecast", "worker", "--app", name, *(["--supervise"] * supervise)]

    done = run(args, {**source_env, **path})

    named = repr(name) if case != "no registry" else name
    if not supervise:
        assert_one_line(done, EXIT_CONFIG, named, *needles)
        return
    # The child says it once and the parent exits with its code, logging that exit: no restarts.
    said = [line for line in done.stderr.splitlines() if named in line and all(n in line for n in needles)]
    assert len(said) == 1, done.stderr
    assert done.returncode == EXIT_CONFIG, done.stderr
    assert done.stderr.count("exited with code 2") == 1, done.stderr
    assert "Traceback" not in done.stdout + done.stderr


def test_a_registry_named_as_in_the_docs_is_found(source_env: dict[str, str], tmp_path: Path) -> None:  # noqa: F811
    name, path = _app(
        tmp_path,
        "from duecast import Registry\ntasks = Registry()\n"
        "@tasks.task('send')\ndef send(payload):\n    return None\n",
    )

    done = run(["-m", "duecast", "worker", "--app", name, "--drain"], {**source_env, **path})

    assert done.returncode == EXIT_OK, done.stderr
    assert "Traceback" not in done.stderr


def test_a_named_attribute_that_is_no_registry_names_the_one_found(
    source_env: dict[str, str], tmp_path: Path  # noqa: F811
) -> None:
    name, path = _app(tmp_path, "from duecast import Registry\ntasks = Registry()\n")

    done = run(["-m", "duecast", "worker", "--app", f"{name}:handlers"], {**source_env, **path})

    assert_one_line(done, EXIT_CONFIG, f"{name}:handlers", f"Registries in {name}: tasks")


@pytest.fixture
def range_source(
    tables: Callable[..., str], sql: pymysql.cursors.Cursor
) -> Iterator[SourceSettings]:
    """A range-mode source over a new table of 3 users, not migrated (its ranges table is dropped after)."""
    table = tables("rescan", rows=3)
    src = SourceSettings(
        name=table, table=table, id_column="user_id", due_column="updated_time", period_s=10, mode="ranges"
    )
    yield src
    sql.execute(f"DROP TABLE IF EXISTS `dc_ranges_{src.name}`")


def _range_env(src: SourceSettings, mysql: MySQLSettings, redis: RedisSettings) -> dict[str, str]:
    return {
        "DUECAST_MYSQL__DATABASE": mysql.database,
        "DUECAST_REDIS__KEY_PREFIX": redis.key_prefix,
        "DUECAST_SOURCES": sources_json(src),
        "DUECAST_JOBS__ENABLED": "false",
    }


@pytest.mark.parametrize("command", [["status"], ["dispatcher", "--drain"]])
def test_a_range_source_not_migrated_says_run_migrate(
    command: list[str],
    range_source: SourceSettings,
    mysql_settings: MySQLSettings,
    redis_settings: RedisSettings,
) -> None:
    done = run(["-m", "duecast", *command], _range_env(range_source, mysql_settings, redis_settings))

    assert_one_line(done, EXIT_CONFIG, f"source {range_source.name}", "ranges table", "run `duecast migrate`")


def test_a_misspelled_column_in_range_mode_names_the_business_table(
    range_source: SourceSettings, mysql_settings: MySQLSettings, redis_settings: RedisSettings, tmp_path: Path
) -> None:
    jobs = {"enabled": False}
    settings = Settings(mysql=mysql_settings, redis=redis_settings, sources=[range_source], jobs=jobs)  # type: ignore[arg-type]
    migrate.apply(settings)
    name, path = _app(
        tmp_path,
        "from duecast import Registry\nhandlers = Registry()\n"
        f"@handlers.row({range_source.name!r}, columns=['statuz'])\ndef check(row):\n    return None\n",
    )
    env = {**_range_env(range_source, mysql_settings, redis_settings), **path}

    done = run(["-m", "duecast", "worker", "--app", name, "--drain"], env)

    line = assert_one_line(done, EXIT_CONFIG, "column(s) statuz", f"table {range_source.table} does not")
    assert "dc_ranges_" not in line


def test_processes_with_an_app_that_cannot_be_loaded_exit_2_without_restarts(
    source_env: dict[str, str], tmp_path: Path  # noqa: F811
) -> None:
    # Each of the 3 forked children imports the app; the first exit 2 stops the others, none restarts.
    name, path = _app(tmp_path, "import no_such_dep_xyz\n")

    done = run(["-m", "duecast", "worker", "--app", name, "--processes", "3"], {**source_env, **path})

    assert done.returncode == EXIT_CONFIG, done.stderr
    said = [line for line in done.stderr.splitlines() if "cannot import the app module" in line]
    assert 1 <= len(said) <= 3, done.stderr  # no child was started again (each says it at its start)
    assert "said its settings or app are wrong; stopping the others" in done.stderr
    assert "Traceback" not in done.stdout + done.stderr


def test_processes_whose_health_ports_would_pass_65535_are_refused_in_one_line(
    source_env: dict[str, str],  # noqa: F811
) -> None:
    env = {**source_env, "DUECAST_HEALTH__PORT": "65535"}

    done = run(["-m", "duecast", "worker", "--app", "x", "--processes", "2"], env)

    assert_one_line(done, EXIT_CONFIG, "--processes 2", "65536", "health.port")
