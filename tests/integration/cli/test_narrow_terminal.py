"""Every `duecast` command that prints tables, at 80 columns (COLUMNS=80, as a terminal or a pipe
gives): no line wider than the terminal, no header or cell cut to `…`, and every row says what it
is about (a job on one line with its id and task; a consumer group with its topic and its name in
each part of a table split to fit)."""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Callable, Iterator

import pymysql
import pytest

from duecast import cli
from duecast.shared.settings import MySQLSettings, RedisSettings, Settings
from duecast.shared.storage.admin import migrate
from tests.integration.cli.test_cli import sources_json
from tests.integration.conftest import Env

pytestmark = pytest.mark.integration
WIDTH = 80
GROUPS = [
    {"topic": "orders", "name": "billing", "start": "earliest"},
    {"topic": "orders", "name": "shipping", "start": "earliest"},
    {"topic": "ledger", "name": "billing", "start": "earliest"},  # the same name under another topic
]
LONG_ERROR = "Traceback ...\nValueError: the invoice service answered 503 Service Unavailable after 3 tries"


@pytest.fixture
def narrow(
    monkeypatch: pytest.MonkeyPatch,
    mysql_settings: MySQLSettings,
    redis_settings: RedisSettings,
    sql: pymysql.cursors.Cursor,
    make_env: Callable[..., Env],
) -> Iterator[str]:
    """Settings with a re-scan source, a jobs table and two topics, in this process's environment,
    at COLUMNS=80; yields the jobs table."""
    tag = uuid.uuid4().hex[:8]
    source = make_env("rescan", rows=3).source
    monkeypatch.delenv("DUECAST_CONFIG", raising=False)
    for key, value in {
        "DUECAST_MYSQL__DATABASE": mysql_settings.database,
        "DUECAST_REDIS__KEY_PREFIX": redis_settings.key_prefix,
        "DUECAST_SOURCES": sources_json(source),
        "DUECAST_JOBS__TABLE": f"jobs_{tag}",
        "DUECAST_JOBS__SCHEDULES_TABLE": f"jobs_{tag}_s",
        "DUECAST_TOPICS__TABLE_PREFIX": f"n{tag}_",
        "DUECAST_TOPICS__NAMES": '["orders", "ledger"]',
        "DUECAST_TOPICS__GROUPS": json.dumps(GROUPS),
        "COLUMNS": str(WIDTH),
    }.items():
        monkeypatch.setenv(key, value)
    migrate.apply(Settings())
    yield f"jobs_{tag}"
    sql.execute(f"DROP TABLE IF EXISTS `jobs_{tag}`, `jobs_{tag}_s`, `jobs_{tag}_runs`, `jobs_{tag}_cursors`")
    for kind in ("topics", "messages", "groups", "deliveries", "attempts", "members"):
        sql.execute(f"DROP TABLE IF EXISTS `n{tag}_{kind}`")


def printed(args: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    assert cli.main(args) in (0, 1), capsys.readouterr()
    out = capsys.readouterr().out
    for line in out.splitlines():
        assert len(line) <= WIDTH, f"duecast {' '.join(args)}: a line of {len(line)} columns:\n{out}"
    assert "…" not in out, f"duecast {' '.join(args)} cut a cell or header:\n{out}"
    return out


def words(out: str) -> set[str]:
    return set(re.findall(r"[\w/.%-]+", out))


def test_every_table_fits_80_columns_uncut(
    narrow: str, sql: pymysql.cursors.Cursor, capsys: pytest.CaptureFixture[str]
) -> None:
    for n in range(3):
        payload = json.dumps({"n": n})
        assert cli.main(["enqueue", "send_invoice_reminder", "--payload", payload, "--no-check"]) == 0
    dead = "dc_state = 4, errors = 20, last_error = %s"
    sql.execute(f"UPDATE `{narrow}` SET {dead} WHERE id = 2", (LONG_ERROR,))
    assert cli.main(["topics", "publish", "orders", "--payload", '{"n": 1}', "--key", "order:1"]) == 0
    capsys.readouterr()

    status = printed(["status"], capsys)
    for header in ("failed", "timed out", "worst staleness", "oldest due age", "in flight", "checks/s"):
        assert all(w in words(status) for w in header.split()), f"{header!r} missing:\n{status}"
    groups = printed(["topics", "status"], capsys)
    for header in ("topic", "group", "backlog", "in flight", "timeouts", "skipped", "alerts", "last id"):
        assert header in groups, f"{header!r} missing:\n{groups}"
    # Each consumer-group row names its topic and its group, in every part the table was split into.
    rows = [line for line in groups.splitlines() if " billing " in line or " shipping " in line]
    assert rows
    for line in rows:
        assert " orders " in line or " ledger " in line, f"a group row without its topic:\n{groups}"
    billing = [line for line in rows if " billing " in line]  # orders/billing and ledger/billing, per part
    assert 2 * sum(" ledger " in line for line in billing) == len(billing) > 0

    jobs = printed(["jobs", "list"], capsys)
    assert "3 job(s)" in jobs
    for job_id in (1, 2, 3):  # one line per job: its id and task together
        row = rf"\s*{job_id}\s+send_invoice_reminder\s"
        assert any(re.match(row, line) for line in jobs.splitlines()), jobs
    assert "ValueError:" in jobs
    assert {"Unavailable", "after", "tries"} <= words(jobs)  # the error wraps; it is not cut
    sql.execute(f"SELECT DATE(created_at) FROM `{narrow}` LIMIT 1")
    assert f"times on {sql.fetchone()[0]}" in jobs  # the day once, in the title; times of day in cells

    printed(["jobs", "show", "2"], capsys)
    printed(["jobs", "list", "--since", "1h", "--state", "dead"], capsys)
    printed(["topics", "show", "orders", "1"], capsys)
    printed(["topics", "find", "orders", "--key", "order:1"], capsys)
    printed(["topics", "volume", "orders", "--buckets", "3"], capsys)


@pytest.mark.parametrize("command", sorted(cli.commands.COMMANDS))
def test_help_fits_80_columns(command: str, narrow: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        cli.main([command, "--help"])
    out = capsys.readouterr().out
    assert max(len(line) for line in out.splitlines()) <= WIDTH, out
