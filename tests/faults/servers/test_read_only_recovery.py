"""Issue 24.5: a 20 s read-only window (`SET GLOBAL read_only = 1`: a failover, maintenance) under load,
on a private MariaDB. Real supervised workers and a dispatcher run a re-scan source (2,000 users made
due again) and a job queue when the server stops taking writes; once it takes them again, every user
is re-checked and every job done within RECOVER_S, not at the 60 s visibility timeout (the issue:
2,000 users unchecked 74.6 s, a popped batch whose start failed on 1290 left for the timeout). 0 lost,
0 (id, attempt) run twice. The recovery is printed (`-s`); docs/reliability.md quotes it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator

import pymysql
import pytest

from duecast.shared.api.enqueue import Enqueuer, Job
from duecast.shared.settings import MySQLSettings, RedisSettings, Settings
from duecast.shared.states import State
from duecast.shared.storage.admin import migrate
from tests.chaos.private_mariadb import PrivateMariaDB, running_with
from tests.faults.checker import classify, read_log
from tests.faults.conftest import SESSION_LOST, FaultEnv
from tests.faults.env import RESCAN_PERIOD_S
from tests.faults.servers.ha_app import JOBS

pytestmark = pytest.mark.faults

DATABASE = "readonly_load"
USER, PASSWORD = "roles", "roles-pw"  # not root: read_only does not bind SUPER
APP = "tests.faults.servers.ha_app"
ROWS = 2000
JOB_COUNT = 1000
WINDOW_S = 20.0
RECOVER_S = 20.0  # far below the 60 s visibility timeout
# A read-only server is duecast's StorageError (1290); a fenced child's exit is the supervisor's to say.
ALLOW = (*SESSION_LOST, "StorageError", "CommitUnknown")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrivateMariaDB]:
    with running_with(tmp_path_factory.mktemp("mariadb"), DATABASE) as db:
        root_sql(db, f"CREATE USER '{USER}'@'%' IDENTIFIED BY '{PASSWORD}'")
        root_sql(db, f"GRANT ALL ON `{DATABASE}`.* TO '{USER}'@'%'")
        yield db


@pytest.fixture(scope="module")
def mysql_settings(server: PrivateMariaDB) -> MySQLSettings:
    """Overrides the session's: fault_env makes its table here (as root)."""
    return server.settings(DATABASE)


@pytest.fixture
def sql(server: PrivateMariaDB) -> Iterator[pymysql.cursors.Cursor]:
    conn = pymysql.connect(
        host="127.0.0.1", port=server.port, user="root", database=DATABASE, autocommit=True
    )
    yield conn.cursor()
    conn.close()


def root_sql(server: PrivateMariaDB, statement: str) -> None:
    conn = pymysql.connect(host="127.0.0.1", port=server.port, user="root", autocommit=True)
    with conn.cursor() as cur:
        cur.execute(statement)
    conn.close()


def test_a_20s_read_only_window_under_load_recovers_within_seconds(
    fault_env: Callable[..., FaultEnv],
    server: PrivateMariaDB,
    mysql_settings: MySQLSettings,
    redis_settings: RedisSettings,
) -> None:
    env = fault_env("rescan", claim_batch=500, visibility_timeout_s=60)
    jobs = {"table": "ro_jobs", "schedules_table": "ro_jobs_s", "queues": ["default"], "run_size": 100}
    settings = Settings(mysql=mysql_settings, redis=redis_settings, jobs=jobs)  # type: ignore[arg-type]
    migrate.apply(settings)
    for key in [k for k in env.env if k.startswith("DUECAST_JOBS")]:  # the fault tier's "no jobs"
        del env.env[key]
    env.env.update(
        {
            "DUECAST_JOBS": json.dumps(jobs),
            "DUECAST_MYSQL__HOST": "127.0.0.1",
            "DUECAST_MYSQL__PORT": str(server.port),
            "DUECAST_MYSQL__USER": USER,
            "DUECAST_MYSQL__PASSWORD": PASSWORD,
            "DUECAST_TEST_ROW_DELAY_MS": "5",
        }
    )
    ids = env.insert(ROWS)
    for name in ("w1", "w2"):
        env.procs.spawn(name, ["-m", "duecast.worker", "--supervise", "--app", APP], env.env, allow=ALLOW)
    dispatcher = env.dispatcher(allow=ALLOW)
    env.wait_for(lambda: not env.pending(), "the first pass", timeout=120)
    first = env.column("checked_by_attempt")

    # Under load when the window opens: every user due again, and jobs flowing.
    env.query(f"UPDATE {{t}} SET due_at = NOW(6) - INTERVAL {2 * RESCAN_PERIOD_S} SECOND")
    job_ids = Enqueuer(settings, None).enqueue_many([Job("ha_job", i) for i in range(JOB_COUNT)])
    env.wait_for(
        lambda: sum(1 for e in read_log(env.exec_log) if e.source == JOBS) >= 50, "jobs to be flowing"
    )
    root_sql(server, "SET GLOBAL read_only = 1")
    try:
        time.sleep(WINDOW_S)  # the fault's length, not a wait for a result
    finally:
        root_sql(server, "SET GLOBAL read_only = 0")
    back = time.monotonic()
    done_at: dict[str, float] = {}

    def recovered() -> bool:
        if "users" not in done_at:
            now = env.column("checked_by_attempt")
            if not env.pending() and all(now[i] > first[i] for i in ids):
                done_at["users"] = time.monotonic() - back
        if "jobs" not in done_at:
            table = settings.jobs.table
            left = env.query(f"SELECT COUNT(*) FROM `{table}` WHERE dc_state <> {int(State.DONE)}")
            if int(left[0][0]) == 0:
                done_at["jobs"] = time.monotonic() - back
        return len(done_at) == 2

    env.wait_for(recovered, "every user re-checked and every job done after read-only", timeout=120)
    print(
        f"\nread-only for {WINDOW_S:.0f}s under load: all {ROWS} users re-checked {done_at['users']:.1f}s "
        f"and all {JOB_COUNT} jobs done {done_at['jobs']:.1f}s after it ended"
    )

    log = read_log(env.exec_log)
    rows = classify(log, env.source.name, ids, env.pending(), env.column("checked_by_attempt"))
    assert not rows.lost
    assert not rows.duplicates
    assert not rows.unexpected
    assert not rows.wrong_outcome
    ran = classify(log, JOBS, [int(j) for j in job_ids])
    assert not ran.lost
    assert not ran.duplicates
    assert not ran.unexpected
    for proc in env.procs.procs.values():
        assert "Traceback" not in proc.log.read_text(), f"{proc.name} logged a traceback"
    assert dispatcher.alive()
    assert max(done_at.values()) <= RECOVER_S, done_at
