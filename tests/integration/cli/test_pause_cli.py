"""`duecast pause` / `duecast resume` in their own processes, against real MariaDB: a pause is listed
and kept, an unknown name is one line and exit 2."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pymysql
import pytest

from duecast.shared.queries.pauses import PAUSES_TABLE
from tests.integration.cli.test_cli import (
    cli_env,  # noqa: F401 - a fixture, used by name
    run_cli,
    sources_json,
)
from tests.integration.conftest import Env

pytestmark = pytest.mark.integration


@pytest.fixture
def source_env(
    cli_env: dict[str, str],  # noqa: F811 - the fixture imported above, by its name
    make_env: Callable[..., Env], sql: pymysql.cursors.Cursor
) -> Iterator[tuple[dict[str, str], str]]:
    env = make_env("rescan", rows=3)  # migrated: duecast_pauses exists
    name = env.source.name
    yield {**cli_env, "DUECAST_SOURCES": sources_json(env.source)}, name
    sql.execute(f"DELETE FROM `{PAUSES_TABLE}` WHERE `source` = %s", (name,))


def test_pause_list_and_resume_a_source(source_env: tuple[dict[str, str], str]) -> None:
    env, name = source_env
    done = run_cli(["pause", "source", name], env)
    assert done.returncode == 0
    assert done.stdout.strip() == f"paused source {name}: nothing more starts within a second"
    assert run_cli(["pause", "source", name], env).stdout.strip() == f"source {name} was already paused"
    listed = run_cli(["pause"], env)
    assert listed.returncode == 0
    assert listed.stdout.startswith(f"source {name}: paused since ")
    assert run_cli(["resume", "source", name], env).stdout.strip() == f"resumed source {name}"
    assert run_cli(["resume", "source", name], env).stdout.strip() == f"source {name} was not paused"
    assert run_cli(["pause"], env).stdout.strip() == "nothing is paused"


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["pause", "source", "nope"], "duecast pause: no source named 'nope' (configured: "),
        (["resume", "source", "nope"], "duecast resume: no source named 'nope' (configured: "),
        (["pause", "queue", "mail"], "duecast pause: no job queue named 'mail' (configured: none)"),
        (["pause", "group", "orders"], "duecast pause: say source NAME, queue NAME or group TOPIC GROUP"),
    ],
)
def test_an_unknown_name_is_one_line_and_exit_2(
    source_env: tuple[dict[str, str], str], args: list[str], says: str
) -> None:
    env, _ = source_env
    done = run_cli(args, env)
    assert done.returncode == 2
    assert done.stderr.startswith(says)
    assert done.stderr.count("\n") == 1
    assert "Traceback" not in done.stderr
