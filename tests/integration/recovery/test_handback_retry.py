"""Issue 24.3: the supervisor's hand-back of an exited worker's leases met a deadlock (1213) or a lock
wait (1205) and was not retried (`could not end its leases of exited worker ...`): those jobs then
waited for their leases. Now a batch that meets one is retried with jittered backoff until it lands
or the leases would have run out anyway, on a session that waits at most 1 s for a lock, and it
never locks another worker's runs. Real MariaDB and Redis; the "workers" are names, their runs
arranged in SQL as a started batch leaves them; time passes by SQL, never by sleeping."""

from __future__ import annotations

import logging
import threading
from datetime import datetime

import pymysql
import pytest

from duecast.shared.api.enqueue import Enqueuer, Job
from duecast.shared.process.runtime import build_stores
from duecast.shared.settings import Settings
from duecast.shared.states import State
from duecast.shared.storage.db import connect
from duecast.shared.storage.leased.members import decode_members
from duecast.worker.handback import Handback, HandedBack
from tests.integration.polling import wait_until
from tests.integration.recovery.test_handback import EXITED, LIVE, SOURCE, WHY, settings  # noqa: F401

pytestmark = pytest.mark.integration


def retries(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if getattr(r, "event", None) == "supervisor.handback_retried"]


def test_a_lock_on_an_exited_workers_run_is_waited_out_and_its_jobs_run_again_within_their_lease(
    settings: Settings,  # noqa: F811
    sql: pymysql.cursors.Cursor,
    caplog: pytest.LogCaptureFixture,
) -> None:
    Enqueuer(settings, None).enqueue_many(Job("record", i) for i in range(6))  # ids 1-6
    (store,) = build_stores(settings, [settings.source(SOURCE)])
    store.claim_due(10)  # six runs of one job each (run_size 1)
    runs = f"`{settings.jobs.runs_table}`"
    for worker, members in ((EXITED, "'1', '2', '3'"), (LIVE, "'4', '5', '6'")):
        sql.execute(
            f"UPDATE {runs} SET dc_state = {int(State.RUNNING)}, started_at = NOW(6), "
            f"lease_until = NOW(6) + INTERVAL 15 SECOND, worker = %s WHERE members IN ({members})",
            (worker,),
        )
    sql.execute(f"SELECT MIN(lease_until) FROM {runs} WHERE worker = %s", (EXITED,))
    (lease_end,) = sql.fetchone()
    assert isinstance(lease_end, datetime)

    # Another session holds a lock on one of the exited worker's runs, as a transaction in flight
    # (another role's statement, a deadlock's other side) does.
    holder = connect(settings.mysql)
    with holder.cursor() as cur:
        cur.execute(f"SELECT id FROM {runs} WHERE members = '2' FOR UPDATE")
    done: dict[str, HandedBack] = {}
    handback = threading.Thread(target=lambda: done.update(back=Handback(settings).after_exit(EXITED, WHY)))
    with caplog.at_level(logging.WARNING, "duecast.supervisor"):
        handback.start()
        try:
            wait_until(lambda: retries(caplog), "the hand-back to meet the lock and retry", timeout_s=15)
        finally:
            holder.rollback()  # the other transaction ends
            holder.close()
        handback.join(timeout=20)
    assert not handback.is_alive()

    assert done["back"] == HandedBack(held=0, interrupted=3, complete=True)
    said = retries(caplog)[0].getMessage()
    assert said.startswith(f"ending the leases of exited worker {EXITED} of {SOURCE} hit ")
    assert "1205" in said  # a lock wait: the session waits 1 s for a lock, then retries
    assert not [r for r in caplog.records if "could not end its leases" in r.getMessage()]
    # The live worker's runs were neither locked nor touched.
    sql.execute(f"SELECT members FROM {runs} WHERE worker = %s AND dc_state = %s", (LIVE, int(State.RUNNING)))
    assert sorted(int(m) for (m,) in sql.fetchall()) == [4, 5, 6]
    # Jobs 1-3 are pending again (interrupted once) and a claim runs them now, well before the lease
    # they held would have ended.
    again = store.claim_due(10)
    sql.execute("SELECT NOW(6) < %s - INTERVAL 5 SECOND", (lease_end,))
    assert sql.fetchone() == (1,)
    sql.execute(f"SELECT members FROM {runs} WHERE id IN ({', '.join(str(e.id) for e in again)})")
    assert sorted(j for (m,) in sql.fetchall() for j in decode_members(m)) == [1, 2, 3]
    table = f"`{settings.jobs.table}`"
    sql.execute(f"SELECT id, interruptions, last_error FROM {table} WHERE id <= 3 ORDER BY id")
    assert sql.fetchall() == tuple((i, 1, WHY) for i in (1, 2, 3))
