"""Registry.on_start / on_stop in a real worker process (`duecast worker --drain`, a child under
--supervise, and each of --processes 2): each runs once per process, the starts before the first
handler begins and the stops after the last one ends; the async ones on the handlers' loop, so an
aiohttp session they open and close is never reported unclosed."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pymysql
import pytest

from duecast import Enqueuer, Job
from duecast.dispatcher.main import serve as serve_dispatcher
from duecast.shared.settings import MySQLSettings, RedisSettings, Settings
from duecast.shared.storage.admin import migrate

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[3]
APP = "tests.integration.hooks_app"


@pytest.fixture
def settings(
    mysql_settings: MySQLSettings, redis_settings: RedisSettings, sql: pymysql.cursors.Cursor
) -> Iterator[Settings]:
    table = f"jobs_{uuid.uuid4().hex[:8]}"
    s = Settings(
        mysql=mysql_settings,
        redis=redis_settings,
        jobs={"table": table, "schedules_table": f"{table}_s"},  # type: ignore[arg-type]
        worker={"app": APP},  # type: ignore[arg-type]
    )
    migrate.apply(s)
    yield s
    sql.execute(f"DROP TABLE IF EXISTS `{table}`, `{table}_s`, `{table}_runs`, `{table}_cursors`")


def worker_env(settings: Settings, log: Path) -> dict[str, str]:
    mysql = settings.mysql
    return {
        **os.environ,
        "DUECAST_MYSQL__HOST": mysql.host,
        "DUECAST_MYSQL__PORT": str(mysql.port),
        "DUECAST_MYSQL__USER": mysql.user,
        "DUECAST_MYSQL__PASSWORD": mysql.password.get_secret_value(),
        "DUECAST_MYSQL__DATABASE": mysql.database,
        "DUECAST_REDIS__KEY_PREFIX": settings.redis.key_prefix,
        "DUECAST_JOBS__TABLE": settings.jobs.table,
        "DUECAST_JOBS__SCHEDULES_TABLE": settings.jobs.schedules_table,
        "HOOKS_LOG": str(log),
    }


def drain_jobs(
    settings: Settings, log: Path, jobs: list[Job], flags: list[str]
) -> tuple[subprocess.Popen[str], str]:
    """Enqueue `jobs`, push them all, and run `duecast worker --app APP --drain *flags` until it
    exits 0 (the hooks and handlers note their events in `log`); the process and its stderr."""
    enqueuer = Enqueuer.from_settings(settings)
    enqueuer.enqueue_many(jobs)
    enqueuer.close()
    serve_dispatcher(settings, threading.Event(), drain=True)  # every job on its ready list
    args = [sys.executable, "-m", "duecast", "worker", "--app", APP, "--drain", *flags]
    env = worker_env(settings, log)
    with subprocess.Popen(
        args, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    ) as proc:
        _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 0, stderr
    return proc, stderr


@pytest.mark.parametrize("supervise", [False, True], ids=["worker", "supervised-child"])
def test_start_hooks_run_before_the_first_handler_and_stop_hooks_after_the_last(
    supervise: bool, settings: Settings, tmp_path: Path
) -> None:
    jobs = [Job("slow_async", f"a{n}") for n in range(3)] + [Job("slow_plain", "p0")]
    flags = ["--concurrency", "2", *(["--supervise"] if supervise else [])]
    proc, stderr = drain_jobs(settings, tmp_path / "hooks.log", jobs, flags)
    assert "Unclosed client session" not in stderr
    lines = [line.split(" ", 1) for line in (tmp_path / "hooks.log").read_text().splitlines()]
    events = [event for _, event in lines]
    pids = {int(pid) for pid, _ in lines}
    # One process ran every hook and handler: the worker itself, or under --supervise its child.
    assert len(pids) == 1
    assert (pids != {proc.pid}) if supervise else (pids == {proc.pid})
    assert events[:2] == ["start-plain", "start-async"]
    assert events[-2:] == ["stop-plain", "stop-async"]  # in reverse order of registration
    runs = events[2:-2]  # every handler began after the starts and ended before the stops
    assert sorted(runs) == sorted(f"{w} {p}" for p in ("a0", "a1", "a2", "p0") for w in ("begin", "end"))


def test_each_of_processes_n_is_a_forked_worker_with_its_own_hooks_and_every_job_runs_once(
    settings: Settings, tmp_path: Path
) -> None:
    # `--processes 2 --drain`: two children forked from one parent; each runs its start hooks before
    # its first handler and its stop hooks after its last; the 12 jobs run once between them.
    payloads = [f"a{n}" for n in range(8)] + [f"p{n}" for n in range(4)]
    jobs = [Job("slow_async" if p[0] == "a" else "slow_plain", p) for p in payloads]
    proc, stderr = drain_jobs(settings, tmp_path / "hooks.log", jobs, ["--processes", "2"])
    assert "supervising 2 worker processes" in stderr
    by_pid: dict[int, list[str]] = {}
    for line in (tmp_path / "hooks.log").read_text().splitlines():
        pid, event = line.split(" ", 1)
        by_pid.setdefault(int(pid), []).append(event)
    assert len(by_pid) == 2
    assert proc.pid not in by_pid
    for events in by_pid.values():
        assert events[:2] == ["start-plain", "start-async"]
        assert events[-2:] == ["stop-plain", "stop-async"]
    ran = sorted(e for events in by_pid.values() for e in events[2:-2] if e.startswith("end "))
    assert ran == sorted(f"end {p}" for p in payloads)
