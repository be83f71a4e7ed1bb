"""RangeStore batches on real MariaDB: spans started committed with no lock held on spans or rows,
outcomes in any order and subsets, a span finished once every row has an outcome or only stragglers
are out (shared.policy.span_settled), stragglers' late writes, refused values and empty spans."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pymysql
import pytest

from duecast.shared.acks import Ack, Row
from duecast.shared.process.runtime import build_stores
from duecast.shared.queries.ranges import ranges_table
from duecast.shared.settings import MySQLSettings, Settings
from duecast.shared.storage.admin import migrate
from duecast.shared.storage.range_store import RANGE_KEY, RangeBatch, RangeStore
from duecast.shared.storage.source_store import AckCounts
from tests.integration import range_app
from tests.integration.polling import wait_until

pytestmark = pytest.mark.integration

IDLE, DISPATCHED, RUNNING = 0, 1, 2
SIZE = 20  # users 1..40: span 1 [0, 20) holds 19 of them, span 2 [20, 40) 20, span 3 [40, 60) one


class Spans:
    def __init__(self, store: RangeStore, sql: pymysql.cursors.Cursor) -> None:
        self.store = store
        self.sql = sql
        self.table = store.business.table
        self.ranges = ranges_table(store.business)

    def states(self) -> dict[int, tuple[int, int, int]]:
        """range_id -> (dc_state, dc_attempt, rows_seen)."""
        self.sql.execute(f"SELECT range_id, dc_state, dc_attempt, rows_seen FROM `{self.ranges}`")
        return {int(r): (int(s), int(a), int(n)) for r, s, a, n in self.sql.fetchall()}

    def status(self, user: int) -> int:
        self.sql.execute(f"SELECT status FROM `{self.table}` WHERE user_id = %s", (user,))
        return int(self.sql.fetchone()[0])

    def start(self, *range_ids: int) -> RangeBatch:
        """Claim every due span, and start these."""
        entries = [e for e in self.store.claim_due(100) if e.id in range_ids]
        return self.store.start(entries, ["status"])

    @contextmanager
    def started(self, *range_ids: int) -> Iterator[RangeBatch]:
        batch = self.start(*range_ids)
        try:
            yield batch
        finally:
            batch.close()


@pytest.fixture
def spans(mysql_settings: MySQLSettings, sql: pymysql.cursors.Cursor) -> Iterator[Spans]:
    src = range_app.users_source(sql, 40, range_size=SIZE)
    settings = Settings(mysql=mysql_settings, sources=[src], jobs={"enabled": False})  # type: ignore[arg-type]
    migrate.apply(settings)
    (store,) = build_stores(settings, settings.sources)
    assert isinstance(store, RangeStore)
    store.verify()
    store.discover(full=True)
    yield Spans(store, sql)
    store.db.close()
    sql.execute(f"DROP TABLE IF EXISTS `{src.table}`, `{ranges_table(src)}`")


def by_user(batch: RangeBatch) -> dict[int, Row]:
    return {int(r["user_id"]): r for r in batch.rows}


def test_spans_start_committed_and_nothing_is_locked_while_their_rows_are_checked(spans: Spans) -> None:
    batch = spans.start(1, 2)
    try:
        assert sorted(by_user(batch)) == list(range(1, 40))
        assert {r[RANGE_KEY] for r in batch.rows} == {0, 20}
        assert spans.states() == {1: (RUNNING, 1, 0), 2: (RUNNING, 1, 0), 3: (DISPATCHED, 1, 0)}
        spans.sql.execute(f"SELECT user_id FROM `{spans.table}` FOR UPDATE NOWAIT")  # no row lock
        spans.sql.execute(f"SELECT range_id FROM `{spans.ranges}` FOR UPDATE NOWAIT")  # no span lock
        spans.sql.execute(f"UPDATE `{spans.table}` SET status = 5 WHERE user_id = 7")
    finally:
        batch.close()


def test_a_span_is_finished_once_every_row_has_an_outcome_in_any_order(spans: Spans) -> None:
    with spans.started(1, 2) as batch:
        rows = by_user(batch)
        first = [(rows[i], Ack.touch(status=7) if i == 3 else Ack.default()) for i in range(19, 9, -1)]
        first.append((rows[3], Ack.touch(status=7)))
        assert batch.ack(first) == AckCounts(0, 0)  # span 1 has 8 rows out: nothing is final yet
        assert spans.states()[1] == (RUNNING, 1, 0)
        assert spans.status(3) == 1  # its change is written when its span is finished
        batch.fail([(rows[i], RuntimeError("down")) for i in (1, 2)])
        assert batch.ack([(rows[i], Ack.default()) for i in range(4, 10)]) == AckCounts(17, 0)
        assert spans.states() == {1: (IDLE, 1, 19), 2: (RUNNING, 1, 0), 3: (DISPATCHED, 1, 0)}
        assert spans.status(3) == 7
        batch.fail([(rows[20], ValueError("bad"))])
        assert batch.ack([(rows[i], Ack.default()) for i in range(21, 40)]) == AckCounts(19, 0)
    assert spans.states() == {1: (IDLE, 1, 19), 2: (IDLE, 1, 20), 3: (DISPATCHED, 1, 0)}


def test_what_a_failure_finishes_is_counted_by_the_next_call(spans: Spans) -> None:
    with spans.started(2) as batch:
        rows = by_user(batch)
        assert batch.ack([(rows[i], Ack.default()) for i in range(21, 40)]) == AckCounts(0, 0)
        batch.fail([(rows[20], RuntimeError("down"))])  # the span's last outcome
        assert spans.states()[2] == (IDLE, 1, 20)
        assert batch.settle() == AckCounts(19, 0)
        assert batch.settle() == AckCounts(0, 0)


def test_stragglers_do_not_hold_their_span_back_and_land_on_their_own(spans: Spans) -> None:
    with spans.started(1, 2) as batch:
        rows = by_user(batch)
        assert batch.ack([(rows[i], Ack.default()) for i in range(2, 20)]) == AckCounts(0, 0)  # 1 out of 19
        assert batch.ack([(rows[i], Ack.default()) for i in range(20, 38)]) == AckCounts(0, 0)  # 2 out of 20
        assert batch.settle() == AckCounts(0, 0)  # too early: its straggler may still come
        finished: list[AckCounts] = []
        wait_until(
            lambda: finished.append(batch.settle()) or spans.states()[1][0] == IDLE,
            "span 1 to be settled without its straggler",
        )
        assert sum(finished, AckCounts(0, 0)) == AckCounts(18, 0)
        assert spans.states() == {1: (IDLE, 1, 19), 2: (RUNNING, 1, 0), 3: (DISPATCHED, 1, 0)}  # 2: 10% out
        # The straggler's change lands: its span was not claimed again.
        assert batch.ack([(rows[1], Ack.touch(status=4))]) == AckCounts(1, 0)
        assert spans.status(1) == 4
        assert batch.ack([(rows[38], Ack.default()), (rows[39], Ack.touch(status=6))]) == AckCounts(20, 0)
    assert spans.status(39) == 6
    assert spans.states()[2] == (IDLE, 1, 20)


def test_a_straggler_whose_span_was_claimed_again_is_dropped_as_stale(spans: Spans) -> None:
    with spans.started(3) as batch:  # span 3 holds one row: it may be left behind after the settle time
        (row,) = batch.rows

        def settled() -> bool:
            batch.settle()
            return spans.states()[3][0] == IDLE

        wait_until(settled, "span 3 to settle without its only row")
        spans.sql.execute(f"UPDATE `{spans.ranges}` SET checked_at = checked_at - INTERVAL 1 HOUR")
        (again,) = [e for e in spans.store.claim_due(100) if e.id == 3]
        assert again.attempt == 2
        assert batch.ack([(row, Ack.touch(status=9))]) == AckCounts(0, 1)  # its attempt is over
    assert spans.status(40) == 1


def test_a_value_the_database_refuses_fails_that_row_alone(spans: Spans) -> None:
    with spans.started(2) as batch:
        rows = by_user(batch)
        acks = [(rows[i], Ack.touch(status="x") if i == 25 else Ack.touch(status=3)) for i in range(20, 40)]
        assert batch.ack(acks) == AckCounts(19, 0, refused=1)
    assert spans.states()[2] == (IDLE, 1, 20)
    assert (spans.status(25), spans.status(26)) == (1, 3)


def test_a_span_whose_rows_are_gone_is_finished_at_its_start(spans: Spans) -> None:
    spans.sql.execute(f"DELETE FROM `{spans.table}` WHERE user_id = 40")
    with spans.started(3) as batch:
        assert batch.rows == []
        assert spans.states()[3] == (IDLE, 1, 0)


def test_a_batch_that_cannot_read_its_rows_gives_its_spans_back(
    spans: Spans, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*args: object) -> list[Row]:
        raise RuntimeError("the read failed")

    monkeypatch.setattr(spans.store, "_rows", broken)
    with pytest.raises(RuntimeError, match="the read failed"):
        spans.start(1, 2)
    assert spans.states() == {1: (IDLE, 1, 0), 2: (IDLE, 1, 0), 3: (DISPATCHED, 1, 0)}  # due again now


def test_a_late_outcome_of_a_span_requeued_as_interrupted_is_stale(spans: Spans) -> None:
    with spans.started(3) as batch:
        (row,) = batch.rows
    spans.sql.execute(f"UPDATE `{spans.ranges}` SET dc_dispatched_at = NOW(6) - INTERVAL 1 HOUR")
    assert spans.store.requeue_interrupted(100) == 1
    assert batch.ack([(row, Ack.touch(status=9))]) == AckCounts(0, 1)
    assert spans.status(40) == 1
    assert spans.states()[3] == (IDLE, 1, 0)


def test_a_value_the_driver_cannot_send_fails_that_row_alone_and_is_logged(
    spans: Spans, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 25, items 1 and 12: a lone surrogate is no DataError (the driver refuses to encode it),
    so it once failed the whole span's finish, retried forever; now that row fails alone, and a
    WARNING names it and why."""
    with caplog.at_level("WARNING", "duecast.worker"), spans.started(2) as batch:
        rows = by_user(batch)
        acks = [(rows[i], Ack.touch(status="\udcff" if i == 25 else 3)) for i in range(20, 40)]
        assert batch.ack(acks) == AckCounts(19, 0, refused=1)
    assert spans.states()[2] == (IDLE, 1, 20)
    assert (spans.status(25), spans.status(26)) == (1, 3)
    refused = [r for r in caplog.records if getattr(r, "event", None) == "worker.ack_refused"]
    assert [r.row_id for r in refused] == [25]  # type: ignore[attr-defined]
    assert "surrogates not allowed" in refused[0].getMessage()
