"""A worker start whose COMMIT got no answer (issue 24.5), on real MariaDB: the session is KILLed at
the start's COMMIT, applied or not. StartUnknown's resume() settles it by a locking re-read under the
start's own fence (attempt, and the time it wrote): what it did start is adopted under that attempt,
what it did not is started again, and what was taken since runs nowhere twice; a range source's
spans are settled the same way and their rows read then."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pymysql
import pytest

from duecast.shared.storage import db
from duecast.shared.storage.protocol import StartUnknown
from duecast.shared.storage.range_store import RangeBatch
from duecast.shared.storage.row_batch import RowBatch
from tests.integration.conftest import Env
from tests.integration.ranges.test_range_batches import (  # noqa: F401 (spans: a fixture)
    DISPATCHED,
    RUNNING,
    Spans,
    by_user,
    spans,
)

pytestmark = pytest.mark.integration
ROWS = 20


@pytest.fixture
def cut_commit(sql: pymysql.cursors.Cursor, monkeypatch: pytest.MonkeyPatch) -> Callable[[bool], None]:
    """cut_commit(applied): the next COMMIT of a duecast session loses its answer (KILLed), having
    been applied by the server or not."""
    real = db._Connection.commit

    def arm(applied: bool) -> None:
        def commit(conn: Any) -> None:
            monkeypatch.setattr(db._Connection, "commit", real)  # once
            if applied:
                real(conn)
            sql.execute(f"KILL CONNECTION {int(conn.thread_id())}")  # not applied: rolled back
            raise pymysql.err.OperationalError(2013, "Lost connection to server during query")

        monkeypatch.setattr(db._Connection, "commit", commit)

    return arm


def _started_at(env: Env) -> dict[int, Any]:
    """id -> dc_dispatched_at of the rows RUNNING: when their start set their lease."""
    return {int(i): at for i, at in env.query("SELECT {pk}, dc_dispatched_at FROM {t} WHERE dc_state = 2")}


@pytest.mark.parametrize("applied", [True, False])
def test_a_start_cut_off_at_its_commit_is_settled_by_its_resume(
    make_env: Callable[..., Env], cut_commit: Callable[[bool], None], applied: bool
) -> None:
    env = make_env("rescan", rows=ROWS)
    entries = env.store.claim_due(100)
    cut_commit(applied)
    with pytest.raises(StartUnknown) as caught:
        env.store.start(entries)
    committed = _started_at(env)
    assert len(committed) == (ROWS if applied else 0)

    batch = caught.value.resume()
    assert isinstance(batch, RowBatch)
    try:
        assert set(batch.entries) == set(entries), "every row started, under its claimed attempt"
        if applied:  # adopted: the start that committed is the one that runs them, not a second start
            assert _started_at(env) == committed
        assert len(_started_at(env)) == ROWS
    finally:
        batch.close()


def test_rows_taken_since_a_cut_off_start_are_run_by_no_one_twice(
    make_env: Callable[..., Env], cut_commit: Callable[[bool], None]
) -> None:
    env = make_env("rescan", rows=ROWS)
    entries = env.store.claim_due(100)
    cut_commit(True)
    with pytest.raises(StartUnknown) as caught:
        env.store.start(entries)
    # Their leases ran out meanwhile (back-dated) and the sweep took them: no longer that start's.
    assert env.backdate_dispatch(where="dc_state = 2") == ROWS
    assert env.store.requeue_interrupted(1000) == ROWS
    batch = caught.value.resume()
    try:
        assert batch.rows == [], "neither adopted nor started again under the attempt the sweep ended"
    finally:
        batch.close()


def test_a_range_start_cut_off_at_its_commit_reads_its_spans_rows_once_settled(
    spans: Spans,  # noqa: F811
    cut_commit: Callable[[bool], None],
) -> None:
    entries = [e for e in spans.store.claim_due(100) if e.id in (1, 2)]
    cut_commit(True)
    with pytest.raises(StartUnknown) as caught:
        spans.store.start(entries, ["status"])
    assert spans.states() == {1: (RUNNING, 1, 0), 2: (RUNNING, 1, 0), 3: (DISPATCHED, 1, 0)}  # it committed
    batch = caught.value.resume()
    assert isinstance(batch, RangeBatch)
    try:
        assert sorted(by_user(batch)) == list(range(1, 40)), "its spans adopted, their rows read"
    finally:
        batch.close()
