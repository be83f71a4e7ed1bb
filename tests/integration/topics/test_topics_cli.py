"""`duecast topics publish/status/show/find/reset/volume` against the test database, through
duecast.cli.commands.main, with the real dispatcher and worker loops run in-process (drain mode)."""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pymysql
import pytest

from duecast import cli
from duecast.dispatcher.main import serve as serve_dispatcher
from duecast.shared.settings import DispatcherSettings, MySQLSettings, RedisSettings, Settings
from duecast.shared.storage.admin import migrate
from duecast.worker.main import serve as serve_worker
from tests.integration import topics_app

pytestmark = pytest.mark.integration
GROUPS = [
    {"topic": "orders", "name": "billing", "start": "earliest", "max_retries": 0, "timeout_s": 60},
    {"topic": "orders", "name": "shipping", "start": "earliest"},
    {"topic": "orders", "name": "audit", "start": "earliest"},
    {"topic": "orders", "name": "cache", "mode": "broadcast", "start": "earliest"},
    {"topic": "ledger", "name": "books", "start": "earliest"},
]


@pytest.fixture
def prefix(
    monkeypatch: pytest.MonkeyPatch,
    mysql_settings: MySQLSettings,
    redis_settings: RedisSettings,
    sql: pymysql.cursors.Cursor,
) -> Iterator[str]:
    name = f"c{uuid.uuid4().hex[:8]}_"
    monkeypatch.delenv("DUECAST_CONFIG", raising=False)
    for key, value in {
        "DUECAST_MYSQL__DATABASE": mysql_settings.database,
        "DUECAST_REDIS__KEY_PREFIX": redis_settings.key_prefix,
        "DUECAST_JOBS__ENABLED": "false",
        "DUECAST_TOPICS__TABLE_PREFIX": name,
        "DUECAST_TOPICS__NAMES": '["orders", "ledger"]',
        "DUECAST_TOPICS__GROUPS": json.dumps(GROUPS),
        "DUECAST_WORKER__APP": "tests.integration.topics_app",
        "DUECAST_WORKER__BLOCK_TIMEOUT_S": "0.1",
        "DUECAST_DISPATCHER__POLL_INTERVAL_S": "0.05",
        "COLUMNS": "250",
    }.items():
        monkeypatch.setenv(key, value)
    migrate.apply(Settings())
    topics_app.RUNS.clear()
    yield name
    for kind in ("topics", "messages", "groups", "deliveries", "attempts", "members"):
        sql.execute(f"DROP TABLE IF EXISTS `{name}{kind}`")


def run_all() -> None:
    settings = Settings()
    serve_dispatcher(settings, threading.Event(), drain=True)
    serve_worker(settings, threading.Event(), drain=True)


def test_publish_one_message_then_a_file_all_or_nothing(
    prefix: str, sql: pymysql.cursors.Cursor, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["topics", "publish", "orders", "--payload", '{"n": 1}', "--key", "o:1"]) == 0
    assert "published message 1 to orders" in capsys.readouterr().out
    good = tmp_path / "good.jsonl"
    good.write_text('{"topic": "orders", "payload": 2}\n\n{"topic": "ledger", "payload": {"table": "x"}}\n')
    assert cli.main(["topics", "publish", "--file", str(good)]) == 0
    assert "published 2 message(s)" in capsys.readouterr().out
    bad = tmp_path / "bad.jsonl"
    bad.write_text(
        '{"topic": "orders", "payload": 3}\n{"topic": "nope"}\nnot json\n{"topic": "orders", "key": ""}\n'
        '{"topic": "orders", "extra": 1}\n'
    )
    assert cli.main(["topics", "publish", "--file", str(bad)]) == 2
    err = capsys.readouterr().err
    # Every line is checked before anything is published, and every bad one is named (issue 16.7).
    assert "4 bad line(s), nothing was published" in err
    assert f"{bad}:2: unknown topic 'nope'" in err
    assert f"{bad}:3: not JSON" in err
    assert f"{bad}:4: a message key must be" in err
    assert f"{bad}:5: expected" in err
    assert f"{bad}:1:" not in err
    sql.execute(f"SELECT COUNT(*) FROM `{prefix}messages`")
    assert sql.fetchone() == (3,)  # the bad file wrote nothing


def test_status_show_find_and_volume(prefix: str, capsys: pytest.CaptureFixture[str]) -> None:
    for n in range(3):
        cli.main(["topics", "publish", "orders", "--payload", json.dumps({"n": n, "fail": ["billing"]})])
    cli.main(["topics", "publish", "orders", "--payload", "7", "--key", "order:7"])
    run_all()
    capsys.readouterr()

    assert cli.main(["topics", "status"]) == 0
    out = capsys.readouterr().out
    assert "consumer groups" in out
    assert "busiest first" in out
    cells = [c.strip() for c in next(line for line in out.splitlines() if " billing " in line).split("│")]
    # topic, group, mode, last id, position, backlog, lag, pending, in flight, dead: 3 dead letters.
    assert cells[1:11] == ["orders", "billing", "cluster", "4", "4", "0", "-", "0", "0", "3"]
    assert cli.main(["status"]) == 0  # the same tables, after the sources and queues
    out = capsys.readouterr().out
    assert "topics.orders-billing" in out  # a cluster group is also a source
    assert "consumer groups" in out
    assert "busiest first" in out
    assert cli.main(["topics", "show", "orders", "1"]) == 0
    out = capsys.readouterr().out
    assert "group billing" in out
    assert "billing cannot take message 1" in out
    assert "read by" in out  # the broadcast member that read it

    assert cli.main(["topics", "find", "orders", "--key", "order:7"]) == 0
    assert "order:7" in capsys.readouterr().out
    assert cli.main(["topics", "volume", "orders", "--buckets", "2"]) == 0
    assert "4" in capsys.readouterr().out


def test_reset_replays_a_group_after_confirmation(prefix: str, capsys: pytest.CaptureFixture[str]) -> None:
    for n in range(4):
        cli.main(["topics", "publish", "orders", "--payload", str(n)])
    run_all()
    topics_app.RUNS.clear()
    assert cli.main(["topics", "reset", "orders", "shipping", "--to", "3", "--yes"]) == 0
    assert "replay after id 2: 2 message(s) again" in capsys.readouterr().out
    assert cli.main(["topics", "reset", "orders", "nobody", "--to", "1", "--yes"]) == 2
    assert "no group 'nobody'" in capsys.readouterr().err
    # A bad --to is one line naming --to, refused before any question (issue 16.7).
    assert cli.main(["topics", "reset", "orders", "shipping", "--to", "yesterday"]) == 2
    out = capsys.readouterr()
    assert out.err.strip().splitlines() == [
        'duecast topics: --to: \'yesterday\' is not a position: give "earliest", "latest", a message id, '
        "or an ISO time with its zone (2026-11-24T09:00:00+00:00)"
    ]
    assert "?" not in out.out  # not asked
    run_all()
    assert topics_app.runs("shipping") == [3, 4]
    assert topics_app.runs("audit") == []


def test_status_shows_a_groups_limits_after_the_dispatcher_claimed_under_them(
    prefix: str,
    monkeypatch: pytest.MonkeyPatch,
    sql: pymysql.cursors.Cursor,
    capsys: pytest.CaptureFixture[str],
) -> None:
    limited = [
        {**g, "rate_limit_per_s": 1000, "rate_burst": 50, "max_running": 20} if g["name"] == "shipping" else g
        for g in GROUPS
    ]
    monkeypatch.setenv("DUECAST_TOPICS__GROUPS", json.dumps(limited))
    for n in range(5):
        cli.main(["topics", "publish", "orders", "--payload", json.dumps({"n": n})])
    try:
        run_all()  # the real dispatcher claims shipping's messages through its bucket
        capsys.readouterr()
        assert cli.main(["status", "--json"]) == 0
        (limit,) = json.loads(capsys.readouterr().out)["limits"]
        assert limit["name"] == "group:orders/shipping"
        assert (limit["rate_limit_per_s"], limit["burst"], limit["max_running"]) == (1000, 50, 20)
        assert 0 <= limit["tokens"] <= 50
        assert cli.main(["status"]) == 0
        assert "group:orders/shipping" in capsys.readouterr().out
        assert cli.main(["topics", "status"]) == 0
        row = next(line for line in capsys.readouterr().out.splitlines() if " shipping " in line)
        cells = [c.strip() for c in row.split("│")]
        assert cells[4:10] == ["5", "5", "0", "-", "0", "0"], "every message claimed and done"
    finally:
        sql.execute(
            f"DELETE FROM `{DispatcherSettings().limits_table}` WHERE `name` = %s", ("group:orders/shipping",)
        )
