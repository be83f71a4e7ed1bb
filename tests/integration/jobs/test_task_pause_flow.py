"""Pause and resume a job task with a dispatcher and a worker running, against real MariaDB and
Redis: within a second of the pause none of its jobs starts while the queue's other task goes on;
what ran finishes; the pause holds through a restart of both roles and a flush of our Redis keys;
resumed, every job runs, once. And `duecast pause task`: listed, kept, an unknown name refused in one
line with exit 2."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pymysql
import pytest

from duecast import cli
from duecast.dispatcher.main import serve as serve_dispatcher
from duecast.shared.api import pauses
from duecast.shared.api.enqueue import Enqueuer, Job
from duecast.shared.fanout.client import connect_redis
from duecast.shared.queries.pauses import PAUSES_TABLE
from duecast.shared.settings import Settings
from duecast.shared.states import State
from duecast.shared.storage.admin import migrate
from duecast.shared.storage.db import Database
from duecast.shared.storage.worker_registry import WorkerRegistry
from duecast.worker.main import serve as serve_worker
from tests.integration import jobs_app
from tests.integration.jobs.test_jobs_cli import table  # noqa: F401 - a fixture, used by name
from tests.integration.polling import wait_until

pytestmark = pytest.mark.integration

PAUSED, OTHER = "record_slowly", "record"
EACH = 40
TAKES_S = 1.0  # a pause is read every 0.5 s by each role, plus a tick


@pytest.fixture
def no_task_pauses(sql: pymysql.cursors.Cursor) -> Iterator[None]:
    yield
    sql.execute(
        f"DELETE FROM `{PAUSES_TABLE}` WHERE `kind` = 'task' AND `name` IN (%s, %s)", (PAUSED, "nope")
    )


class Roles:
    """A dispatcher and a worker in threads, until stopped."""

    def __init__(self, settings: Settings) -> None:
        self.stop = threading.Event()
        self.threads = [
            threading.Thread(target=serve_dispatcher, args=(settings, self.stop), daemon=True),
            threading.Thread(target=serve_worker, args=(settings, self.stop), daemon=True),
        ]
        for t in self.threads:
            t.start()

    def end(self) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(timeout=15)
        assert not any(t.is_alive() for t in self.threads)


def ran(kind: str, after: float = 0.0) -> list[int]:
    with jobs_app._lock:
        return [p[1] for p, at in jobs_app.RUNS if p[0] == kind and at > after]


def runs_left(sql: pymysql.cursors.Cursor, table: str) -> int:  # noqa: F811
    sql.execute(f"SELECT COUNT(*) FROM `{table}_runs`")
    return int(sql.fetchone()[0])


def pending_of(sql: pymysql.cursors.Cursor, table: str, task: str) -> int:  # noqa: F811
    sql.execute(f"SELECT COUNT(*) FROM `{table}` WHERE task = %s AND dc_state = {int(State.IDLE)}", (task,))
    return int(sql.fetchone()[0])


def test_a_paused_task_stops_within_a_second_the_other_flows_and_resumed_all_run_once(
    table: str,  # noqa: F811 - the fixture imported above, by its name
    sql: pymysql.cursors.Cursor,
    no_task_pauses: None,
) -> None:
    settings = Settings()
    enqueuer = Enqueuer(settings, None)
    enqueuer.enqueue_many(Job(t, [k, i]) for i in range(EACH) for t, k in ((PAUSED, "p"), (OTHER, "o")))
    roles = Roles(settings)
    try:
        wait_until(lambda: len(ran("p")) >= 3, "the first jobs of the task to pause")
        assert pauses.pause(settings, "task", PAUSED)
        paused_at = time.time()
        wait_until(lambda: time.time() > paused_at + TAKES_S, "the second a pause may take", timeout_s=5)
        enqueuer.enqueue_many(
            Job(t, [k, i]) for i in range(EACH, 2 * EACH) for t, k in ((PAUSED, "p"), (OTHER, "o"))
        )
        # The other task goes on: every one of its jobs runs, those enqueued after the pause too.
        wait_until(lambda: len(ran("o")) == 2 * EACH, "the other task's jobs", timeout_s=30)
        # What had started finishes (a run started before the pause took runs all its members), and
        # no run is left: the paused task's jobs are pending on their rows, in no run.
        wait_until(lambda: runs_left(sql, table) == 0, "the runs in flight to finish")
        halted = len(ran("p"))
        assert max(ran("p")) < EACH  # none of those enqueued after the pause took ran
        assert pending_of(sql, table, PAUSED) == 2 * EACH - halted

        # Both roles restart and Redis forgets us: the pause is a row in MySQL.
        roles.end()
        r = connect_redis(settings.redis)
        keys = list(r.scan_iter(match=f"{{{settings.redis.key_prefix}}}*", count=1000))
        if keys:
            r.delete(*keys)
        r.close()
        roles = Roles(settings)
        enqueuer.enqueue(OTHER, ["o", 2 * EACH])
        wait_until(lambda: len(ran("o")) == 2 * EACH + 1, "the other task after the restart")
        restarted_at = time.time()
        wait_until(
            lambda: time.time() > restarted_at + TAKES_S, "a second of the restarted roles", timeout_s=5
        )
        assert len(ran("p")) == halted
        assert [p.name for p in pauses.paused(settings) if p.kind == "task"] == [PAUSED]

        assert pauses.resume(settings, "task", PAUSED)
        assert not pauses.resume(settings, "task", PAUSED)
        wait_until(lambda: len(ran("p")) == 2 * EACH, "every job of the resumed task", timeout_s=30)
    finally:
        roles.end()
        enqueuer.db.close()
    assert sorted(ran("p")) == list(range(2 * EACH))  # each once: nothing lost, nothing twice
    assert sorted(ran("o")) == list(range(2 * EACH + 1))
    sql.execute(f"SELECT DISTINCT dc_state, dc_attempt, errors FROM `{table}`")
    assert sql.fetchall() == ((int(State.DONE), 1, 0),)  # no attempt used up by the pause


def test_pause_task_on_the_command_line_names_known_tasks_and_refuses_others_in_one_line(
    table: str,  # noqa: F811 - the fixture imported above, by its name
    sql: pymysql.cursors.Cursor,
    no_task_pauses: None,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # With worker.app: its tasks.
    assert cli.main(["pause", "task", PAUSED]) == 0
    assert capsys.readouterr().out == f"paused task {PAUSED}: nothing more starts within a second\n"
    assert cli.main(["pause", "task", PAUSED]) == 0
    assert capsys.readouterr().out == f"task {PAUSED} was already paused\n"
    assert cli.main(["pause"]) == 0
    assert f"task {PAUSED}: paused since " in capsys.readouterr().out
    assert cli.main(["pause", "task", "nope"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("duecast pause: no task named 'nope' (worker.app serve: ")
    assert err.count("\n") == 1

    # Without it: the tasks the live workers registered; a paused one resumes even with none.
    workers = f"{table}_w"
    monkeypatch.delenv("DUECAST_WORKER__APP")
    monkeypatch.setenv("DUECAST_WORKER__REGISTRY_TABLE", workers)
    migrate.apply(Settings())
    registry = WorkerRegistry(Database(Settings().mysql), Settings().worker)
    try:
        assert cli.main(["pause", "task", "send"]) == 2
        assert (
            capsys.readouterr().err == "duecast pause: no task named 'send' (the live workers serve: none)\n"
        )
        assert cli.main(["resume", "task", PAUSED]) == 0
        assert capsys.readouterr().out == f"resumed task {PAUSED}\n"
        assert cli.main(["resume", "task", "nope"]) == 2
        assert "no task named 'nope'" in capsys.readouterr().err
        registry.register("w1", ["jobs.default"], {"send", "record"})
        assert cli.main(["pause", "task", "send"]) == 0
        assert cli.main(["resume", "task", "send"]) == 0
        assert capsys.readouterr().out.splitlines() == [
            "paused task send: nothing more starts within a second",
            "resumed task send",
        ]
    finally:
        registry.db.close()
        sql.execute(f"DROP TABLE IF EXISTS `{workers}`")
