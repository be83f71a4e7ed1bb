"""Acks the database refuses, on real MariaDB (issue 25, items 1 and 12): each fails its own row
alone, with a log line naming the row and why; its batch-mates are acked, nothing stays RUNNING."""

from __future__ import annotations

import logging

import pytest

from duecast.shared.acks import Ack
from duecast.shared.storage import source_store
from duecast.shared.storage.source_store import AckCounts
from tests.integration.flow.store_helpers import DISPATCHED, IDLE, MakeEnv, entries

pytestmark = pytest.mark.integration


def _refusals(caplog: pytest.LogCaptureFixture) -> dict[object, str]:
    return {
        r.row_id: r.getMessage()  # type: ignore[attr-defined]
        for r in caplog.records
        if getattr(r, "event", None) == "worker.ack_refused"
    }


def test_values_the_database_or_driver_refuses_fail_their_row_alone_and_say_which_and_why(
    make_env: MakeEnv, caplog: pytest.LogCaptureFixture
) -> None:
    env = make_env("oneoff", rows=5)
    env.store.claim_due(10)
    with (
        caplog.at_level(logging.WARNING, "duecast.worker"),
        env.store.started(entries([1, 2, 3, 4, 5])) as batch,
    ):
        rows = {r["id"]: r for r in batch.rows}
        counts = batch.ack(
            [
                (rows[1], Ack.touch(delay_s=60, payload="fine")),
                (rows[2], Ack.touch(delay_s=60, payload="x" * 65)),  # 1406: too long for VARCHAR(64)
                (rows[3], Ack.touch(delay_s=60, payload="name \udcff")),  # the driver cannot encode it
                (rows[4], Ack.touch(delay_s=60, payload="fine")),
                (rows[5], Ack.delete()),
            ]
        )
    assert counts == AckCounts(acked=3, stale=0, refused=2)
    # The refused one-off rows failed: DISPATCHED under a new attempt, for the sweeper; none RUNNING.
    assert env.states() == {1: (IDLE, 1), 2: (DISPATCHED, 2), 3: (DISPATCHED, 2), 4: (IDLE, 1)}
    refused = _refusals(caplog)
    assert set(refused) == {2, 3}
    assert "row 2 of " in refused[2]
    assert "Data too long" in refused[2]
    assert "row 3 of " in refused[3]
    assert "surrogate" in refused[3]


def test_an_overflow_the_database_raises_as_an_operational_error_fails_its_row_alone(
    make_env: MakeEnv, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """1916 (NOW(6) + INTERVAL 1e24 MICROSECOND) is an OperationalError, once outside the value
    errors: the whole ack was retried for as long as the worker lived. The store now refuses such
    a delay first (shared.limits); with that check taken away the database's refusal still fails
    only its row."""
    env = make_env("rescan", rows=3)
    monkeypatch.setattr(source_store, "check_times", lambda ack, max_delay_s, now=None: None)
    env.store.claim_due(10)
    with caplog.at_level(logging.WARNING, "duecast.worker"), env.store.started(entries([1, 2, 3])) as batch:
        rows = {r["user_id"]: r for r in batch.rows}
        counts = batch.ack(
            [(rows[1], Ack.touch(status=5)), (rows[2], Ack("touch", delay_s=1e18)), (rows[3], Ack.default())]
        )
    assert counts == AckCounts(acked=2, stale=0, refused=1)
    assert env.states() == {1: (IDLE, 1), 2: (IDLE, 1), 3: (IDLE, 1)}  # 2 failed: due at its next period
    assert dict(env.query("SELECT {pk}, status FROM {t}")) == {1: 5, 2: 1, 3: 1}
    assert list(_refusals(caplog)) == [2]
    assert "1916" in _refusals(caplog)[2] or "Got overflow" in _refusals(caplog)[2]
