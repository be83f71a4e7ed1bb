"""Fenced writes whatever a proxy does to rows-matched counts (issue 24.10): duecast connects with
CLIENT_FOUND_ROWS (an UPDATE reports the rows it matched), but MySQL proxies do not reliably keep that
flag (vitess#8328, proxysql#1324) and then report the rows it changed. Every fenced UPDATE changes a
column of each row it matches (a state, an attempt, a NOW(6) time), so both counts are equal: the ack
path below counts the same with the flag on and off.
"""

from __future__ import annotations

import pymysql
import pytest
from pymysql.constants import CLIENT

from duecast.shared.acks import Ack
from duecast.shared.api.enqueue import Job
from duecast.shared.entries import Entry
from duecast.shared.storage import db
from duecast.shared.storage.source_store import AckCounts
from tests.integration.flow.roles_helpers import MakeEnv
from tests.integration.jobs.conftest import env  # noqa: F401 - the JobsEnv fixture
from tests.integration.jobs.jobs_env import JobsEnv

pytestmark = pytest.mark.integration

FLAGS = {"found-rows": CLIENT.FOUND_ROWS, "changed-rows": 0}


@pytest.fixture(params=list(FLAGS), ids=list(FLAGS))
def client_flag(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> int:
    """Every connection duecast opens in this test is made with this client flag (as behind a proxy
    that drops CLIENT_FOUND_ROWS, for "changed-rows")."""
    flag = FLAGS[request.param]

    class Flagged(db._Connection):  # the one place connect() builds a connection
        def __init__(self, *args: object, **kwargs: object) -> None:
            kwargs["client_flag"] = flag
            super().__init__(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(db, "_Connection", Flagged)
    return flag


def _flag_in_use(connection: pymysql.Connection) -> bool:  # type: ignore[type-arg]
    return bool(connection.client_flag & CLIENT.FOUND_ROWS)


def test_row_acks_renewals_and_stale_acks_count_alike_with_or_without_found_rows(
    client_flag: int, make_env: MakeEnv
) -> None:
    source = make_env("rescan", rows=4)
    assert source.store.claim_due(10) == [Entry(i, 1) for i in (1, 2, 3, 4)]
    with source.store.db.transaction() as cur:
        assert _flag_in_use(cur.connection) == bool(client_flag)  # the flag really is the test's
    with source.store.started([Entry(1, 1), Entry(2, 1), Entry(3, 1)]) as batch:
        rows = {r["user_id"]: r for r in batch.rows}
        # A renewal right after the start, and a second one: each changes the lease's time.
        assert source.store.extend_leases(source.store.db, [Entry(1, 1)]).kept == {1}
        assert source.store.extend_leases(source.store.db, [Entry(1, 1)]).kept == {1}
        # status=1 is what the row holds already: the ack still changes its state and due time.
        counts = batch.ack([(rows[1], Ack.touch(status=1)), (rows[2], Ack.default())])
        assert counts == AckCounts(acked=2, stale=0)
        assert batch.ack([(rows[1], Ack.default())]) == AckCounts(acked=0, stale=1)  # acked already
        batch.fail([(rows[3], RuntimeError("boom"))])
    assert source.states()[3] == (0, 1)  # failed: IDLE, due again at its next period
    source.backdate_dispatch(where="dc_state IN (1, 2)")
    assert source.store.requeue_expired(60, 100) == 1  # 4: claimed, never started
    assert source.store.claim_due(10) == [Entry(4, 2)]
    with source.store.started([Entry(4, 1)]) as old:
        assert old.rows == []  # a stale entry starts nothing
    with source.store.started([Entry(4, 2)]) as batch:
        (row,) = batch.rows
        assert batch.ack([(row, Ack.default())]) == AckCounts(acked=1, stale=0)


def test_job_finishes_and_stale_acks_count_alike_with_or_without_found_rows(
    client_flag: int,
    env: JobsEnv,  # noqa: F811 - the fixture imported above
) -> None:
    runs = env.with_jobs(run_size=2)
    store = runs.store()
    ids = runs.enqueuer.enqueue_many(Job("record", i) for i in range(2))
    (run,) = store.claim_due(10)
    with store.started([run]) as batch:
        one, two = sorted(batch.rows, key=lambda r: int(r["id"]))
        assert batch.ack([(one, Ack.default())]).acked == 1
        assert batch.ack([(one, Ack.default())]) == AckCounts(acked=0, stale=1)
    stale_ids = runs.enqueuer.enqueue_many(Job("record", i) for i in range(10, 12))
    (late,) = store.claim_due(10)  # the job `two` is still in the first run, not yet finished
    slow = store.start([late])
    slow.close()  # its worker stalls: no renewals
    runs.sql.execute(
        f"UPDATE `{runs.settings.jobs.runs_table}` "
        "SET dc_dispatched_at = dc_dispatched_at - INTERVAL 1 HOUR, "
        "lease_until = lease_until - INTERVAL 1 HOUR "
        "WHERE id = %s",
        (late.id,),
    )
    assert store.requeue_interrupted(100) == 2
    counts = slow.ack([(row, Ack.default()) for row in slow.rows])
    assert (counts.acked, counts.stale) == (0, 2)  # its runs went back: the late ack is stale
    assert all(runs.exists(i) for i in stale_ids)
    assert not runs.exists(ids[0])
    assert two["id"] == ids[1]
