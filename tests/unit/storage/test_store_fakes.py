"""The store contract (tests/unit/store_contract.py) against tests/unit/fakes.py's FakeStore.

The same suite runs against every real store kind on MariaDB (tests/integration/
test_store_contract.py), so what the dispatcher, sweeper and worker tests learn from the fake holds
for the real stores too.
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from duecast.shared.acks import Row
from duecast.shared.entries import Entry
from tests.unit.fakes import FakeStore, rescan_source
from tests.unit.store_contract import StoreContract


class FakeKind:
    def __init__(self) -> None:
        self.store = FakeStore(rescan_source())

    def other(self) -> FakeStore:
        return self.store.other()

    def seed(self, n: int) -> list[int]:
        # Due in the reverse of id order, so a claim that went by id would show.
        first = max(self.store.rows, default=0) + 1
        ids = list(range(first + n - 1, first - 1, -1))
        self.store.add_due(Entry(i, 1) for i in ids)
        return ids

    def backdate(self, ids: Sequence[int], seconds: float) -> None:
        self.store.backdate(ids, seconds)

    def entry_id(self, row: Row) -> int:
        return int(row[self.store.id_column])


class TestFakeStore(StoreContract):
    @pytest.fixture
    def kind(self) -> FakeKind:
        return FakeKind()
