"""The store contract: claiming, starting, acking and sweeping, one suite for every store kind.

Run against the real stores on MariaDB (tests/integration/flow/test_store_contract.py) and against the
in-memory fake the unit tests use (tests/unit/storage/test_store_fakes.py), so the fake cannot drift from
what the roles really get. Subclass the behaviour classes (or `StoreContract` for all of them) and
provide a `kind` fixture: the store under test plus the arrangements only its backend can make:

    class TestRowStore(StoreContract):
        @pytest.fixture
        def kind(self, make_env): ...  # -> a `Kind`

Nothing here assumes a table layout: state is arranged through `Kind` and read back through the
store's own methods (a claim, a started batch, a sweep), as the roles see it.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import Protocol

import pytest

from duecast.shared.acks import Ack, Row
from duecast.shared.entries import Entry
from duecast.shared.states import ATTEMPT_COLUMN
from duecast.shared.storage.source_store import WorkBatch

VISIBILITY_S = 60.0  # the visibility timeout every sweep in this suite passes
LONG_AGO_S = 3600.0  # back-dated this far, a dispatch (and a lease) is past any timeout here
RECENT_S = 30.0  # back-dated this far, a dispatch is still within VISIBILITY_S
NO_SUCH_ID = 10**9  # an id no kind has a row for


class ContractStore(Protocol):
    """What the suite exercises: the methods the dispatcher, sweeper and worker call."""

    def claim_due(self, limit: int) -> list[Entry]: ...
    def start(self, entries: Sequence[Entry], columns: Sequence[str] = ()) -> WorkBatch: ...
    def started(
        self, entries: Sequence[Entry], columns: Sequence[str] = ()
    ) -> AbstractContextManager[WorkBatch]: ...
    def requeue_expired(self, visibility_timeout_s: float, limit: int) -> int: ...
    def requeue_interrupted(self, limit: int) -> int: ...


class Kind(Protocol):
    """One store kind under test, with the arrangements its backend makes (SQL for the real ones)."""

    @property
    def store(self) -> ContractStore: ...
    def other(self) -> ContractStore: ...  # the same source's store as another process has it
    def seed(self, n: int) -> list[int]: ...  # n new due entries' ids, in the order claims take them
    def backdate(self, ids: Sequence[int], seconds: float) -> None: ...  # their dispatch and lease
    def entry_id(self, row: Row) -> int: ...  # the entry a started row belongs to


def fresh(ids: Sequence[int], attempt: int = 1) -> list[Entry]:
    return [Entry(i, attempt) for i in ids]


def started_ids(kind: Kind, batch: WorkBatch) -> set[int]:
    return {kind.entry_id(row) for row in batch.rows}


def requeue_and_reclaim(kind: Kind, entry: Entry) -> Entry:
    """What happens behind a slow worker's back: its entry expires (never started) or its lease runs
    out (started), it is requeued, and claimed again under the next attempt."""
    kind.backdate([entry.id], LONG_AGO_S)
    other = kind.other()
    assert other.requeue_expired(VISIBILITY_S, 100) + other.requeue_interrupted(100) == 1
    (again,) = [e for e in kind.store.claim_due(100) if e.id == entry.id]
    assert again.attempt == entry.attempt + 1
    return again


class _Contract:
    @pytest.fixture
    def kind(self) -> Kind:
        raise NotImplementedError("subclass a store contract and provide a `kind` fixture")


class ClaimContract(_Contract):
    def test_nothing_due_claims_nothing(self, kind: Kind) -> None:
        assert kind.store.claim_due(10) == []

    def test_claims_take_at_most_limit_in_due_order_each_once(self, kind: Kind) -> None:
        ids = kind.seed(5)
        assert kind.store.claim_due(3) == fresh(ids[:3])
        assert kind.store.claim_due(10) == fresh(ids[3:])  # the dispatched three are not due
        assert kind.store.claim_due(10) == []

    def test_a_claim_hands_out_the_attempt_after_the_rows_last(self, kind: Kind) -> None:
        ids = kind.seed(3)
        first = kind.store.claim_due(10)
        kind.backdate(ids, LONG_AGO_S)
        assert kind.store.requeue_expired(VISIBILITY_S, 100) == 3
        assert kind.store.claim_due(10) == fresh(ids, attempt=2)
        assert [e.attempt for e in first] == [1, 1, 1]


class StartContract(_Contract):
    def test_started_yields_rows_only_for_current_entries(self, kind: Kind) -> None:
        ids = kind.seed(4)
        a, b, c = kind.store.claim_due(3)
        asked = [a, Entry(b.id, 2), Entry(ids[3], 1), Entry(NO_SUCH_ID, 1), c]
        # ...an attempt not handed out yet, a row not dispatched, a row that does not exist.
        with kind.store.started(asked) as batch:
            assert started_ids(kind, batch) == {a.id, c.id}
            assert {(kind.entry_id(r), r[ATTEMPT_COLUMN]) for r in batch.rows} == {(a.id, 1), (c.id, 1)}
            assert batch.skipped == 3

    def test_an_entry_of_an_earlier_attempt_starts_nothing(self, kind: Kind) -> None:
        kind.seed(1)
        (entry,) = kind.store.claim_due(1)
        again = requeue_and_reclaim(kind, entry)
        with kind.store.started([entry]) as batch:
            assert (batch.rows, batch.skipped) == ([], 1)
        with kind.store.started([again]) as batch:
            assert (started_ids(kind, batch), batch.skipped) == ({entry.id}, 0)

    def test_started_refuses_an_empty_batch(self, kind: Kind) -> None:
        with pytest.raises(ValueError, match="at least one entry"), kind.store.started([]):
            pass

    def test_a_start_is_a_compare_and_set(self, kind: Kind) -> None:
        """Committed before any handler runs: a second start of the same entries, by any process,
        while the first batch runs or after it, starts nothing (one execution per attempt)."""
        kind.seed(2)
        a, b = kind.store.claim_due(2)
        first = kind.store.start([a, b])
        try:
            assert started_ids(kind, first) == {a.id, b.id}
            with kind.other().started([a, b]) as copy:
                assert (copy.rows, copy.skipped) == ([], 2)
            first.ack([(row, Ack.default()) for row in first.rows if kind.entry_id(row) == a.id])
        finally:
            first.close()
        with kind.other().started([a, b]) as copy:  # b was never acked: it stays started
            assert (copy.rows, copy.skipped) == ([], 2)


class AckContract(_Contract):
    def test_an_ack_finishes_its_rows_and_they_are_not_handed_out_again(self, kind: Kind) -> None:
        ids = kind.seed(3)
        a, b, c = kind.store.claim_due(3)
        with kind.store.started([a, b]) as batch:
            counts = batch.ack([(row, Ack.default()) for row in batch.rows])
            assert (counts.acked, counts.stale) == (len(batch.rows), 0)
        with kind.store.started([a, b]) as batch:
            assert (batch.rows, batch.skipped) == ([], 2)  # finished: no longer dispatched
        assert kind.store.claim_due(10) == []  # nor due at once (re-scan: a period later)
        kind.backdate(ids, LONG_AGO_S)
        assert kind.other().requeue_expired(VISIBILITY_S, 100) == 1  # c only
        assert kind.store.claim_due(10) == [Entry(c.id, 2)]


class StaleAckContract(_Contract):
    def test_an_ack_after_the_row_was_requeued_and_reclaimed_is_stale(self, kind: Kind) -> None:
        kind.seed(2)
        a, b = kind.store.claim_due(2)
        with kind.store.started([a]) as slow:  # a slow worker, whose lease runs out meanwhile
            pass
        again = requeue_and_reclaim(kind, a)
        counts = slow.ack([(row, Ack.default()) for row in slow.rows])  # its late ack
        assert (counts.acked, counts.stale) == (0, len(slow.rows))
        with kind.store.started([b]) as batch:
            counts = batch.ack([(row, Ack.default()) for row in batch.rows])
        assert (counts.acked, counts.stale) == (len(batch.rows), 0)
        with kind.store.started([again]) as batch:  # never applied: attempt 2 holds the row
            assert started_ids(kind, batch) == {a.id}

    def test_a_lease_that_ran_out_is_requeued_once_and_claimed_under_a_new_attempt(self, kind: Kind) -> None:
        kind.seed(1)
        (a,) = kind.store.claim_due(1)
        with kind.store.started([a]):  # its worker dies: no ack, and its lease is not renewed
            pass
        other = kind.other()
        assert other.requeue_expired(VISIBILITY_S, 100) + other.requeue_interrupted(100) == 0  # still leased
        kind.backdate([a.id], LONG_AGO_S)
        assert other.requeue_expired(VISIBILITY_S, 100) + other.requeue_interrupted(100) == 1
        assert other.requeue_expired(VISIBILITY_S, 100) + other.requeue_interrupted(100) == 0
        assert kind.store.claim_due(10) == [Entry(a.id, 2)]


class SweepContract(_Contract):
    def test_only_rows_dispatched_longer_than_the_timeout_are_requeued(self, kind: Kind) -> None:
        ids = kind.seed(6)
        kind.store.claim_due(6)
        kind.backdate(ids[:4], LONG_AGO_S)
        kind.backdate(ids[4:5], RECENT_S)
        assert kind.store.requeue_expired(VISIBILITY_S, 3) == 3
        assert kind.store.requeue_expired(VISIBILITY_S, 100) == 1
        assert kind.store.requeue_expired(VISIBILITY_S, 100) == 0
        assert kind.store.claim_due(10) == fresh(ids[:4], attempt=2)  # due as before, in order

    def test_rows_never_claimed_are_not_swept(self, kind: Kind) -> None:
        kind.seed(2)
        assert kind.store.requeue_expired(VISIBILITY_S, 100) == 0

    def test_an_open_batch_is_not_swept(self, kind: Kind) -> None:
        ids = kind.seed(3)
        a, _, _ = kind.store.claim_due(3)
        kind.backdate(ids, LONG_AGO_S)
        with kind.store.started([a]) as batch:
            assert started_ids(kind, batch) == {a.id}
            assert kind.other().requeue_expired(VISIBILITY_S, 100) == 2  # a is leased, from its start
            assert kind.other().requeue_interrupted(100) == 0
        assert kind.store.claim_due(10) == [e for e in fresh(ids, attempt=2) if e.id != a.id]


class StoreContract(ClaimContract, StartContract, AckContract, StaleAckContract, SweepContract):
    """Every behaviour: for a kind that supports them all."""
