"""`duecast status` while Redis does not answer (issue 24.10): the sources' and queues' backlog is read
from MySQL, where it lives, with one line saying Redis is unreachable (was: no sources at all)."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from duecast.shared.process.failures import EXIT_UNAVAILABLE
from tests.faults.private_redis import free_port
from tests.integration.cli.test_cli import cli_env, run_cli, sources_json, status_row  # noqa: F401 - a fixture
from tests.integration.conftest import Env

pytestmark = pytest.mark.integration


def test_status_shows_the_mysql_side_while_redis_is_unreachable(
    make_env: Callable[..., Env],
    cli_env: dict[str, str],  # noqa: F811
) -> None:
    env = make_env("rescan", rows=2500, name="user_block_status_eu_west")
    env.store.claim_due(1200)  # in flight: claimed, their entries (in a Redis now gone) aside
    closed = free_port()  # nothing listens there: a refused connection, as a Redis that is down
    refused = {
        **cli_env,
        "DUECAST_SOURCES": sources_json(env.source),
        "DUECAST_REDIS__URL": f"redis://127.0.0.1:{closed}/0",
    }

    done = run_cli(["status"], refused)
    as_json = run_cli(["status", "--json"], refused)

    assert done.returncode == EXIT_UNAVAILABLE, done.stderr
    (line,) = done.stderr.splitlines()
    assert line.startswith("duecast status: Redis: ")
    assert f"127.0.0.1:{closed}" in line
    assert "Traceback" not in done.stdout + done.stderr
    row = status_row(done.stdout, "user_block_status_eu_west")
    assert (row["due"], row["in flight"], row["in Redis"]) == ("1,300", "1,200", "?"), done.stdout
    assert as_json.returncode == EXIT_UNAVAILABLE
    doc = json.loads(as_json.stdout)
    (source,) = doc["sources"]
    assert (source["name"], source["due"], source["in_flight"]) == ("user_block_status_eu_west", 1300, 1200)
    assert (source["in_redis"], source["counters"]) == (None, None)  # unknown, not zero
    assert doc["unavailable"] == [line.removeprefix("duecast status: ")]
