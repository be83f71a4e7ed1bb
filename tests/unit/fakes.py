"""Test doubles for the MySQL side: stores with the methods the roles call, scripted per test.

They keep no SQL and no state machine: each answers from a script and records what it was asked.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager

from duecast.shared.api.handlers import Ack, Row
from duecast.shared.fanout.keys import Entry
from duecast.shared.settings import SourceSettings
from duecast.shared.states import ATTEMPT_COLUMN
from duecast.shared.storage.source_store import AckCounts, SourceStore


def rescan_source(name: str = "users", **overrides: object) -> SourceSettings:
    """A valid re-scan source (touch, period 10 s); keyword overrides replace any field."""
    fields: dict[str, object] = {
        "name": name,
        "table": name,
        "id_column": "user_id",
        "due_column": "updated_time",
        "period_s": 10.0,
        "on_success": "touch",
    }
    fields.update(overrides)
    return SourceSettings.model_validate(fields)


class FakeClaimStore:
    """Stands in for SourceStore.claim_due: returns up to `limit` of the due entries, in order."""

    def __init__(self, src: SourceSettings, due: Iterable[Entry] = ()) -> None:
        self.src = src
        self.due = list(due)
        self.limits: list[int] = []  # the `limit` of every claim_due call
        self.dispatched = []
        self.released = []

    def claim_due(self, limit: int) -> list[Entry]:
        self.limits.append(limit)
        claimed, self.due = self.due[:limit], self.due[limit:]
        self.dispatched.extend(claimed)
        return claimed

    # State a failed push acts on (a real store keeps it in MySQL).
    dispatched: list[Entry]
    released: list[Entry]

    def release_unpushed(self, entries: list[Entry]) -> int:
        self.released.extend(entries)
        self.dispatched = [e for e in self.dispatched if e not in entries]
        return len(entries)


class FakeRedeliveryStore:
    """Stands in for a store's requeue_* methods: each cause answers a scripted count per call
    (then 0, never more than the limit), and every call is recorded as (cause, arguments...)."""

    def __init__(self, src: SourceSettings, **counts: Iterable[int]) -> None:
        self.src = src
        self.counts = {cause: list(n) for cause, n in counts.items()}
        self.calls: list[tuple[object, ...]] = []

    def _next(self, cause: str, limit: int) -> int:
        script = self.counts.get(cause, [])
        return min(script.pop(0), limit) if script else 0

    def requeue_expired(self, visibility_timeout_s: float, limit: int) -> int:
        self.calls.append(("expired", visibility_timeout_s, limit))
        return self._next("expired", limit)

    def requeue_lost(self, limit: int) -> int:
        self.calls.append(("lost", limit))
        return self._next("lost", limit)

    def requeue_interrupted(self, limit: int) -> int:
        self.calls.append(("interrupted", limit))
        return self._next("interrupted", limit)

    def requeue_held(self, entries: Sequence[Entry]) -> int:
        self.calls.append(("held", list(entries)))
        return len(entries)


class FakeBatch:
    def __init__(self, store: FakeWorkStore, rows: list[Row], skipped: int) -> None:
        self._store = store
        self.rows = rows
        self.skipped = skipped

    def phases(self) -> list[list[Row]]:
        return [self.rows] if self.rows else []

    def fail(self, failures: Sequence[tuple[Row, object]]) -> None:
        self._store.failed.extend(row for row, _ in failures)

    def ack(self, acks: Sequence[tuple[Row, Ack]]) -> AckCounts:
        id_column = self._store.src.id_column
        done = [(row, ack) for row, ack in acks if row[id_column] not in self._store.stale_on_ack]
        self._store.acked.extend(done)
        return AckCounts(len(done), len(acks) - len(done))


class FakeWorkStore:
    """Stands in for SourceStore.started/group_key: rows are 'locked' when (id, attempt) is current.

    `current` maps id -> the attempt the table holds as DISPATCHED; `stale_on_ack` ids lose their
    fence between the lock and the ack (as if requeued and re-claimed) so their acks count as stale.
    group_key is the real SourceStore.group_key: it is pure given `src` and `columns`.
    """

    group_key = SourceStore.group_key

    def __init__(
        self, src: SourceSettings, current: dict[int, int], columns: Iterable[str] = ("status",)
    ) -> None:
        self.src = src
        self.id_column = src.id_column
        self.rows_per_entry = 1
        self.current = dict(current)
        self.columns = frozenset({src.id_column, src.due_column, ATTEMPT_COLUMN, *columns})
        self.stale_on_ack: set[int] = set()
        self.started_with: list[tuple[list[Entry], tuple[str, ...]]] = []
        self.acked: list[tuple[Row, Ack]] = []
        self.failed: list[Row] = []

    @contextmanager
    def started(self, entries: Sequence[Entry], columns: Sequence[str] = ()) -> Iterator[FakeBatch]:
        self.started_with.append((list(entries), tuple(columns)))
        rows = [
            {self.src.id_column: e.id, ATTEMPT_COLUMN: e.attempt}
            for e in entries
            if self.current.get(e.id) == e.attempt
        ]
        yield FakeBatch(self, rows, len(entries) - len(rows))
