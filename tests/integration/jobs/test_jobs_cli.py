"""`duecast enqueue` (one job and --file), `duecast jobs show/list/retry/replay/discard` and the
per-queue `duecast status`, against the test database through duecast.cli.commands.main."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pymysql
import pytest

from duecast import cli
from duecast.dispatcher.main import serve as serve_dispatcher
from duecast.shared.process.failures import EXIT_NO, EXIT_UNCONFIRMED
from duecast.shared.settings import MySQLSettings, RedisSettings, Settings
from duecast.shared.states import State
from duecast.shared.storage.admin import migrate
from duecast.shared.storage.db import Database
from duecast.shared.storage.leased.jobs import JobStore
from duecast.shared.storage.worker_registry import WorkerRegistry
from duecast.worker.main import serve as serve_worker
from tests.integration import jobs_app

pytestmark = pytest.mark.integration


@pytest.fixture
def table(
    monkeypatch: pytest.MonkeyPatch,
    mysql_settings: MySQLSettings,
    redis_settings: RedisSettings,
    sql: pymysql.cursors.Cursor,
) -> Iterator[str]:
    name = f"jobs_{uuid.uuid4().hex[:8]}"
    monkeypatch.delenv("DUECAST_CONFIG", raising=False)
    for key, value in {
        "DUECAST_MYSQL__DATABASE": mysql_settings.database,
        "DUECAST_REDIS__KEY_PREFIX": redis_settings.key_prefix,
        "DUECAST_JOBS__TABLE": name,
        "DUECAST_JOBS__SCHEDULES_TABLE": f"{name}_s",
        "DUECAST_JOBS__QUEUES": '["default", "mail"]',
        "DUECAST_JOBS__RETENTION_S": "3600",
        "DUECAST_WORKER__APP": "tests.integration.jobs_app",
        "DUECAST_WORKER__BLOCK_TIMEOUT_S": "0.1",
        "DUECAST_DISPATCHER__POLL_INTERVAL_S": "0.05",
        "COLUMNS": "250",
    }.items():
        monkeypatch.setenv(key, value)
    migrate.apply(Settings())
    jobs_app.RUNS.clear()
    yield name
    sql.execute(f"DROP TABLE IF EXISTS `{name}`, `{name}_s`, `{name}_runs`, `{name}_cursors`")


def states(sql: pymysql.cursors.Cursor, table: str) -> dict[int, int]:
    sql.execute(f"SELECT id, dc_state FROM `{table}` ORDER BY id")
    return {int(i): int(s) for i, s in sql.fetchall()}


def run_all() -> None:
    settings = Settings()
    serve_dispatcher(settings, threading.Event(), drain=True)
    serve_worker(settings, threading.Event(), drain=True)


def test_enqueue_one_job_with_its_options(
    table: str, sql: pymysql.cursors.Cursor, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["--payload", '{"to": "a@b"}', "--queue", "mail", "--priority", "3", "--max-attempts", "7"]
    assert (
        cli.main(["enqueue", "record", *args, "--unique-key", "u1", "--app", "tests.integration.jobs_app"])
        == 0
    )
    assert "enqueued job 1 (record)" in capsys.readouterr().out
    sql.execute(f"SELECT queue, task, payload, priority, max_attempts, unique_key FROM `{table}`")
    assert sql.fetchall() == (("mail", "record", '{"to":"a@b"}', 3, 7, "u1"),)
    # The duplicate: refused with exit 2, or kept as the same job.
    assert cli.main(["enqueue", "record", "--unique-key", "u1"]) == 2
    assert "already holds this unique key" in capsys.readouterr().err
    assert cli.main(["enqueue", "record", "--unique-key", "u1", "--on-duplicate", "keep"]) == 0
    assert capsys.readouterr().out == (
        "merged into job 1 (record), which holds unique key 'u1'; nothing enqueued\n"
    )
    assert cli.main(["enqueue", "nope", "--app", "tests.integration.jobs_app"]) == 2
    assert "unknown task 'nope'" in capsys.readouterr().err
    assert cli.main(["enqueue", "record", "--concurrency-key", "acct-7"]) == 0
    capsys.readouterr()
    sql.execute(f"SELECT concurrency_key FROM `{table}` WHERE concurrency_key IS NOT NULL")
    assert sql.fetchall() == (("acct-7",),)
    assert cli.main(["enqueue", "record", "--concurrency-key", "acct-7 "]) == 2
    assert "concurrency_key 'acct-7 ' ends in a space" in capsys.readouterr().err


def test_a_unique_key_is_per_task_and_a_merge_is_reported_as_one(
    table: str, sql: pymysql.cursors.Cursor, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The probe's case (issue 17): `fail` with a key a `record` job in another queue holds."""
    assert cli.main(["enqueue", "record", "--unique-key", "report:42"]) == 0
    assert capsys.readouterr().out == "enqueued job 1 (record)\n"
    keep = ["--unique-key", "report:42", "--on-duplicate", "keep"]
    assert cli.main(["enqueue", "fail_always", "--queue", "mail", *keep]) == 0
    assert capsys.readouterr().out == "enqueued job 2 (fail_always)\n"
    assert cli.main(["enqueue", "fail_always", "--payload", "9", *keep]) == 0
    assert capsys.readouterr().out == (
        "merged into job 2 (fail_always), which holds unique key 'report:42'; nothing enqueued\n"
    )
    sql.execute(f"SELECT id, queue, task, payload FROM `{table}` ORDER BY id")
    assert sql.fetchall() == ((1, "default", "record", "null"), (2, "mail", "fail_always", "null"))

    path = tmp_path / "jobs.jsonl"
    lines = [
        {"task": "record", "payload": 1, "unique_key": "report:42"},  # merged into job 1
        {"task": "record", "payload": 2, "unique_key": "new"},
        {"task": "give_up", "payload": 3, "unique_key": "report:42"},
        {"task": "record", "payload": 4, "unique_key": "new"},  # merged into line 2's job
    ]
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    assert cli.main(["enqueue", "--file", str(path)]) == 2
    assert "already holds this unique key" in capsys.readouterr().err
    assert cli.main(["enqueue", "--file", str(path), "--on-duplicate", "keep"]) == 0
    sql.execute(f"SELECT id FROM `{table}` WHERE unique_key = 'new'")
    ((new,),) = sql.fetchall()
    assert capsys.readouterr().out == (
        f"enqueued 2 job(s) from {path}; 2 merged into active jobs of their task holding their unique "
        f"key: line 1 -> job 1, line 4 -> job {new}\n"
    )
    sql.execute(f"SELECT task, payload FROM `{table}` WHERE id > 2 ORDER BY id")
    assert sql.fetchall() == (("record", "2"), ("give_up", "3"))


def test_enqueue_a_file_is_all_or_nothing_and_names_the_bad_line(
    table: str, sql: pymysql.cursors.Cursor, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    good = [
        json.dumps({"task": "record", "payload": {"n": i}, "queue": "mail" if i % 2 else "default"})
        for i in range(12_000)
    ]
    path = tmp_path / "jobs.jsonl"
    path.write_text("\n".join([*good[:11_000], '{"task": "record", "priority": 12}', *good[11_000:]]) + "\n")
    assert cli.main(["enqueue", "--file", str(path)]) == 2
    assert f"{path}:11001: priority must be an int 0-9" in capsys.readouterr().err
    assert states(sql, table) == {}

    path.write_text("\n".join(good) + "\n\n")
    assert cli.main(["enqueue", "--file", str(path)]) == 0
    assert "enqueued 12,000 job(s)" in capsys.readouterr().out
    sql.execute(f"SELECT queue, COUNT(*) FROM `{table}` GROUP BY queue ORDER BY queue")
    assert sql.fetchall() == (("default", 6000), ("mail", 6000))


def test_show_list_retry_replay_and_discard(
    table: str, sql: pymysql.cursors.Cursor, capsys: pytest.CaptureFixture[str]
) -> None:
    for args in (["record", "--payload", '"ok"'], ["fail_always", "--max-attempts", "1"], ["give_up"]):
        assert cli.main(["enqueue", *args]) == 0
    assert cli.main(["enqueue", "record", "--delay", "3600"]) == 0
    run_all()
    assert states(sql, table) == {1: State.DONE, 2: State.DEAD, 3: State.DEAD, 4: State.IDLE}
    capsys.readouterr()

    assert cli.main(["jobs", "show", "2"]) == 0
    out = capsys.readouterr().out
    assert "dead" in out
    assert "RuntimeError: boom None" in out
    # When its last attempt began: the run's start, written at its finish (issue 26.7: was `-`).
    started = [line for line in out.splitlines() if " started_at " in line]
    assert len(started) == 1
    assert re.search(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d", started[0]), started[0]
    assert cli.main(["jobs", "list", "--state", "dead"]) == 0
    out = capsys.readouterr().out
    assert "2 job(s)" in out
    assert "fail_always" in out
    assert "give_up" in out

    # retry applies to dead jobs only; a filter narrows it.
    assert cli.main(["jobs", "retry", "--task", "fail_always", "--yes"]) == 0
    assert "retry: 1 of 1 job(s)" in capsys.readouterr().out
    sql.execute(f"SELECT dc_state, errors FROM `{table}` WHERE id = 2")
    assert sql.fetchone() == (State.IDLE, 0)
    assert cli.main(["jobs", "retry", "--yes"]) == 2  # no ids, no filter, no --all
    assert "needs job ids, a filter, or --all" in capsys.readouterr().err

    # replay re-runs done jobs too (kept thanks to retention_s).
    jobs_app.RUNS.clear()
    assert cli.main(["jobs", "replay", "--state", "done", "--yes"]) == 0
    run_all()
    assert "ok" in [p for p, _ in jobs_app.RUNS]

    # discard never touches a job in flight; --yes skips the question.
    assert cli.main(["jobs", "discard", "3", "4", "--yes"]) == 0
    assert "discard: 2 of 2 job(s)" in capsys.readouterr().out
    assert 3 not in states(sql, table)
    assert 4 not in states(sql, table)


def test_a_job_in_a_running_run_shows_as_running_and_is_not_discarded(
    table: str, sql: pymysql.cursors.Cursor, capsys: pytest.CaptureFixture[str]
) -> None:
    """A run's jobs keep their rows untouched while they run: `show` reads their run instead, and
    `discard` leaves them alone (never a job in flight)."""
    assert cli.main(["enqueue", "record"]) == 0
    settings = Settings()
    src = settings.source("jobs.default")
    store = JobStore(Database(settings.mysql), src, settings.jobs, settings.mysql)
    (run,) = store.claim_due(10)
    with store.started([run]):
        capsys.readouterr()
        assert cli.main(["jobs", "show", "1"]) == 0
        out = capsys.readouterr().out
        assert "running" in out
        assert f"{run.id} (attempt 1)" in out
        assert store.worker in out
        assert cli.main(["jobs", "discard", "1", "--yes"]) == 0
        assert "discard: 0 of 1 job(s)" in capsys.readouterr().out
        assert states(sql, table) == {1: State.IDLE}


class Terminal(io.StringIO):
    """stdin at a terminal, where the operator types `answer`."""

    def isatty(self) -> bool:
        return True


def test_a_bulk_action_asks_at_a_terminal_and_refuses_in_a_script_without_yes(
    table: str,
    sql: pymysql.cursors.Cursor,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert cli.main(["enqueue", "record"]) == 0
    capsys.readouterr()
    # A script (no terminal): one line, exit 4, nothing changed.
    monkeypatch.setattr("sys.stdin", open("/dev/null"))  # noqa: SIM115 - closed with the test
    assert cli.main(["jobs", "discard", "--all"]) == EXIT_UNCONFIRMED
    err = capsys.readouterr().err
    assert err.splitlines() == [
        "duecast jobs: discard 1 job(s) needs confirmation and there is no terminal to ask on; pass --yes"
    ]
    assert states(sql, table) == {1: State.IDLE}
    # At a terminal it asks: no changes nothing (exit 1), yes does it.
    monkeypatch.setattr("sys.stdin", Terminal("n\n"))
    assert cli.main(["jobs", "discard", "--all"]) == EXIT_NO
    assert "nothing changed" in capsys.readouterr().out
    assert states(sql, table) == {1: State.IDLE}
    monkeypatch.setattr("sys.stdin", Terminal("y\n"))
    assert cli.main(["jobs", "discard", "--all"]) == 0
    assert states(sql, table) == {}
    # Ids named one by one need no question, terminal or not: `duecast jobs discard 2` in a script.
    assert cli.main(["enqueue", "record"]) == 0
    monkeypatch.setattr("sys.stdin", open("/dev/null"))  # noqa: SIM115
    assert cli.main(["jobs", "discard", "2"]) == 0
    assert "discard: 1 of 1 job(s)" in capsys.readouterr().out
    assert states(sql, table) == {}


def test_status_shows_each_queue_by_state(table: str, capsys: pytest.CaptureFixture[str]) -> None:
    for args in (["record"], ["record", "--delay", "600"], ["record", "--queue", "mail"]):
        assert cli.main(["enqueue", *args]) == 0
    capsys.readouterr()
    assert cli.main(["status"]) == 0
    out = capsys.readouterr().out
    assert "job queues" in out
    rows = {line.split("│")[1].strip(): line for line in out.splitlines() if line.count("│") > 5}
    default = [c.strip() for c in rows["default"].split("│")[2:9]]
    assert default == ["2", "1", "1", "0", "0", "0", "0"]  # pending, due, scheduled, ... dead
    mail = [c.strip() for c in rows["mail"].split("│")[2:9]]
    assert mail == ["1", "1", "0", "0", "0", "0", "0"]


def test_the_readme_jobs_example_runs(mysql_settings: MySQLSettings, redis_settings: RedisSettings) -> None:
    root = Path(__file__).resolve().parents[3]
    env = {
        **{
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("DUECAST_JOBS", "DUECAST_SOURCES", "DUECAST_CONFIG"))
        },
        "DUECAST_MYSQL__DATABASE": mysql_settings.database,
        "DUECAST_REDIS__KEY_PREFIX": redis_settings.key_prefix,
    }
    out = subprocess.run(
        [sys.executable, "-m", "duecast.examples.jobs_quickstart"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    assert "refused a duplicate" in out
    assert "audited sign-up checked" in out
    assert "flaky: dead, 2 error(s) RuntimeError: the mail server said no" in out
    assert "maybe_later: pending" in out


def test_enqueue_without_an_app_checks_the_task_against_what_live_workers_serve(
    table: str,
    sql: pymysql.cursors.Cursor,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    workers = f"{table}_w"
    monkeypatch.delenv("DUECAST_WORKER__APP")
    monkeypatch.setenv("DUECAST_WORKER__REGISTRY_TABLE", workers)
    migrate.apply(Settings())
    registry = WorkerRegistry(Database(Settings().mysql), Settings().worker)
    try:
        # Nobody can say yet: refused, naming the ways out.
        assert cli.main(["enqueue", "record"]) == 2
        assert "no live worker serves queue 'default'" in capsys.readouterr().err

        registry.register("w1", ["jobs.default"], {"record", "send"})
        registry.register("w2", ["jobs.mail"], None)  # a worker too old to list its tasks
        assert cli.main(["enqueue", "recrod"]) == 2
        assert "unknown task 'recrod'" in capsys.readouterr().err
        assert cli.main(["enqueue", "record"]) == 0
        assert cli.main(["enqueue", "send", "--queue", "mail"]) == 2
        assert "no live worker serves queue 'mail'" in capsys.readouterr().err
        assert cli.main(["enqueue", "anything", "--queue", "mail", "--no-check"]) == 0
        # A file: checked against every live worker's tasks, every line before any is written.
        path = tmp_path / "jobs.jsonl"
        path.write_text('{"task": "send", "queue": "mail"}\n{"task": "sned"}\n')
        assert cli.main(["enqueue", "--file", str(path)]) == 2
        assert f"{path}:2: unknown task 'sned'" in capsys.readouterr().err

        # A worker silent past worker.dead_after_s no longer counts.
        sql.execute(f"UPDATE `{workers}` SET heartbeat_at = NOW(6) - INTERVAL 1 HOUR WHERE name = 'w1'")
        assert cli.main(["enqueue", "record"]) == 2

        sql.execute(f"SELECT task, queue FROM `{table}` ORDER BY id")
        assert sql.fetchall() == (("record", "default"), ("anything", "mail"))
    finally:
        registry.db.close()
        sql.execute(f"DROP TABLE IF EXISTS `{workers}`")


def test_an_action_that_changes_nothing_says_why_and_exits_1(
    table: str, sql: pymysql.cursors.Cursor, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["enqueue", "record"]) == 0
    capsys.readouterr()

    assert cli.main(["jobs", "retry", "1"]) == EXIT_NO
    said = "retry: nothing changed: job 1 is pending; this applies to dead jobs only"
    assert capsys.readouterr().out.strip() == said
    assert cli.main(["jobs", "retry", "1", "99", "--queue", "mail"]) == EXIT_NO
    assert "job 1 is pending; there is no job 99;" in capsys.readouterr().out
    assert cli.main(["jobs", "discard", "1", "--queue", "mail"]) == EXIT_NO
    assert "job 1 is pending but not in the filter" in capsys.readouterr().out
    assert cli.main(["jobs", "retry", "--task", "nope", "--yes"]) == EXIT_NO
    assert "retry: nothing changed: no dead job matches" in capsys.readouterr().out
    assert states(sql, table) == {1: State.IDLE}


def test_since_and_until_take_a_time_ago_from_the_database_clock(
    table: str, sql: pymysql.cursors.Cursor, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["enqueue", "record"]) == 0
    sql.execute(f"UPDATE `{table}` SET created_at = NOW(6) - INTERVAL 2 DAY")
    assert cli.main(["enqueue", "record"]) == 0
    capsys.readouterr()

    cases = [
        (["--since", "1d"], "1 job(s)"), (["--until", "1d"], "1 job(s)"), (["--since", "3d"], "2 job(s)"),
    ]
    for args, listed in cases:
        assert cli.main(["jobs", "list", *args]) == 0
        assert listed in capsys.readouterr().out, args
    assert cli.main(["jobs", "list", "--since", "1h", "--until", "2026-01-01"]) == 0
    assert "0 job(s)" in capsys.readouterr().out
