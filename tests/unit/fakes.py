"""Test doubles for the MySQL side: FakeStore, a small in-memory model of a row-mode SourceStore.

It keeps what the table keeps for dispatch (state, attempt, due time, dispatch time or lease) and makes
the same transitions, fenced the same way: a start is a committed compare-and-set (DISPATCHED ->
RUNNING), each ack or fail its own fenced finish, leases kept while a batch is open and requeued as
interrupted once they run out. So it passes the store contract (tests/unit/store_contract.py, run by
test_store_fakes.py) the real stores pass. It records what the roles asked, for assertions.
FakeClaimStore, FakeSweepStore and FakeWorkStore are the same model, arranged for one role's tests.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, cast

from duecast.shared.acks import Ack, Row
from duecast.shared.entries import Entry
from duecast.shared.limits import MAX_DELAY_S
from duecast.shared.settings import SourceSettings
from duecast.shared.states import ATTEMPT_COLUMN, State
from duecast.shared.storage.source_store import AckCounts, SourceStore

LONG_AGO_S = 1_000_000.0  # arranged "long ago": past any period or visibility timeout
TICK_S = 1e-6  # the clock moves a microsecond per reading, as NOW(6) does between statements


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


@dataclass
class FakeRow:
    attempt: int  # the last attempt handed out (0: never claimed)
    due_at: float  # on the store's clock; an IDLE row is due from then, oldest first
    state: State = State.IDLE
    # DISPATCHED: when it was claimed; RUNNING: its lease's last renewal (dc_dispatched_at, in SQL).
    dispatched_at: float | None = None


class FakeBatch:
    """Rows a start made RUNNING; each ack or fail is fenced on (id, attempt, RUNNING), as in SQL.
    While open, its leases are kept: requeue_interrupted never takes its rows (the keeper's job)."""

    def __init__(self, store: FakeStore, rows: list[Row], skipped: int) -> None:
        self._store = store
        self.rows = rows
        self.skipped = skipped
        self.later: list[list[Entry]] = []
        self.suspects = False  # never interrupted-and-blamed: rows and spans have no such count
        self.ids = {int(r[store.id_column]) for r in rows}

    def phases(self) -> list[list[Row]]:
        return [self.rows] if self.rows else []

    def fail(self, failures: Sequence[tuple[Row, object]]) -> None:
        """A re-scan row is due again at its next period; a one-off row is left DISPATCHED under
        a new attempt, for the sweeper (its visibility timeout is the retry delay)."""
        store = self._store
        for row, _ in failures:
            store.failed.append(row)
            current = store.running(row)
            if current is None:
                continue
            if store.src.period_s > 0:
                current.state, current.due_at = State.IDLE, store.now() + store.src.period_s
            else:
                current.state, current.dispatched_at = State.DISPATCHED, store.now()
                current.attempt += 1

    def ack(self, acks: Sequence[tuple[Row, Ack]]) -> AckCounts:
        store = self._store
        keys = [store.group_key(ack) for _, ack in acks]  # refused before any change, as in SQL
        done = 0
        for (row, ack), key in zip(acks, keys, strict=True):
            current = store.running(row)
            if current is None:
                continue  # stale: requeued (and maybe re-claimed) since it was started
            if key[0] == "delete":
                del store.rows[int(row[store.id_column])]
            else:
                current.state = State.IDLE
                current.due_at = store.now() + store.src.period_s + key[1]
            store.acked.append((row, ack))
            done += 1
        return AckCounts(done, len(acks) - done)

    def settle(self) -> AckCounts:
        return AckCounts(0, 0)

    def close(self) -> None:
        self._store.live.pop(id(self), None)


class FakeStore:
    """Stands in for SourceStore (row mode): claim_due, start and the requeue_* methods, by cause.

    group_key is the real SourceStore.group_key: it is pure given `src` and `columns`.
    """

    def __init__(self, src: SourceSettings, columns: Iterable[str] = ("status",)) -> None:
        self.src = src
        self.id_column = src.id_column
        self.rows_per_entry = 1
        self.claim_weight = 1
        self.columns = frozenset({src.id_column, src.due_column, ATTEMPT_COLUMN, *columns})
        self.max_delay_s = MAX_DELAY_S  # jobs.max_delay_s, as SourceStore.group_key reads it
        self.rows: dict[int, FakeRow] = {}
        self.live: dict[int, FakeBatch] = {}  # open batches, whose leases are kept
        self._clock = 0.0
        # What the roles asked, for the unit tests' assertions.
        self.limits: list[int] = []  # the `limit` of every claim_due call
        self.calls: list[tuple[float, int]] = []  # (visibility_timeout_s, limit) per requeue_expired
        self.started_with: list[tuple[list[Entry], tuple[str, ...]]] = []
        self.acked: list[tuple[Row, Ack]] = []
        self.failed: list[Row] = []
        self.released: list[Entry] = []  # release_unpushed's entries
        self.requeued = 0  # rows requeue_lost put back
        self.asked: list[str] = []  # the cause of every requeue_* call, in order

    def group_key(self, ack: Ack) -> Any:
        return SourceStore.group_key(cast(SourceStore, self), ack)

    def now(self) -> float:
        self._clock += TICK_S
        return self._clock

    def current(self, row: Row, state: State = State.DISPATCHED) -> FakeRow | None:
        """The row if it is in `state` under the attempt `row` carries: what a fence matches."""
        found = self.rows.get(int(row[self.id_column]))
        if found is None or found.state != state or found.attempt != int(row[ATTEMPT_COLUMN]):
            return None
        return found

    def running(self, row: Row) -> FakeRow | None:
        return self.current(row, State.RUNNING)

    # -- arranging -------------------------------------------------------------------------------

    def add_due(self, entries: Iterable[Entry]) -> None:
        """Idle rows, due in this order; each entry is what the next claim hands out for its row."""
        for e in entries:
            self.rows[e.id] = FakeRow(e.attempt - 1, self.now() - LONG_AGO_S)

    def add_dispatched(self, current: dict[int, int]) -> None:
        """Rows dispatched just now: id -> the attempt their entry carries."""
        for i, attempt in current.items():
            self.rows[i] = FakeRow(attempt, self.now() - LONG_AGO_S, State.DISPATCHED, self.now())

    def add_expired(self, n: int) -> None:
        """n more rows dispatched long ago and never acked: the sweeper's work."""
        first = max(self.rows, default=0) + 1
        self.add_dispatched({i: 1 for i in range(first, first + n)})
        self.backdate(range(first, first + n), LONG_AGO_S)

    def backdate(self, ids: Iterable[int], seconds: float) -> None:
        """Age the dispatch of DISPATCHED rows and the lease of RUNNING ones."""
        for i in ids:
            row = self.rows[i]
            if row.dispatched_at is not None and row.state != State.IDLE:
                row.dispatched_at -= seconds

    def take_over(self, row_id: int) -> None:
        """Another worker took the row over (its lease ran out mid-batch, it was requeued, claimed
        and started again): the row's attempt moves on, so the holder's ack is stale."""
        self.rows[row_id].attempt += 1

    # -- the store -------------------------------------------------------------------------------

    def claim_due(self, limit: int) -> list[Entry]:
        self.limits.append(limit)
        now = self.now()
        due = sorted((r.due_at, i) for i, r in self.rows.items() if r.state == State.IDLE and r.due_at <= now)
        claimed = []
        for _, i in due[:limit]:
            row = self.rows[i]
            row.attempt += 1
            row.state, row.dispatched_at = State.DISPATCHED, now
            claimed.append(Entry(i, row.attempt))
        return claimed

    def start(self, entries: Sequence[Entry], columns: Sequence[str] = ()) -> FakeBatch:
        """DISPATCHED -> RUNNING for the entries still current: a compare-and-set, committed."""
        if not entries:
            raise ValueError("start() needs at least one entry")
        self.started_with.append((list(entries), tuple(columns)))
        rows: list[Row] = []
        for e in dict.fromkeys(entries):
            row = {self.id_column: e.id, ATTEMPT_COLUMN: e.attempt}
            if (current := self.current(row)) is not None:
                current.state, current.dispatched_at = State.RUNNING, self.now()
                rows.append(row)
        batch = FakeBatch(self, rows, len(entries) - len(rows))
        self.live[id(batch)] = batch
        return batch

    @contextmanager
    def started(self, entries: Sequence[Entry], columns: Sequence[str] = ()) -> Iterator[FakeBatch]:
        batch = self.start(entries, columns)
        try:
            yield batch
        finally:
            batch.close()

    def requeue_expired(self, visibility_timeout_s: float, limit: int) -> int:
        self.asked.append("expired")
        self.calls.append((visibility_timeout_s, limit))
        return self._requeue(State.DISPATCHED, visibility_timeout_s, limit)

    def requeue_lost(self, limit: int, dispatched_s: float = 0.0) -> int:
        self.asked.append("lost")
        n = self._requeue(State.DISPATCHED, dispatched_s, limit)
        self.requeued += n
        return n

    def requeue_interrupted(self, limit: int) -> int:
        """RUNNING rows whose lease ran out -> IDLE at once; an open batch's leases are kept."""
        self.asked.append("interrupted")
        return self._requeue(State.RUNNING, self.src.lease_s, limit)

    def requeue_held(self, entries: Sequence[Entry]) -> int:
        """A dead worker's popped rows, never started -> IDLE at once, fenced on the attempt it held."""
        self.asked.append("held")
        return self._give_back(entries)

    def _requeue(self, state: State, after_s: float, limit: int) -> int:
        """Rows in `state` since before now - after_s -> IDLE, due unchanged, attempt untouched."""
        cutoff = self.now() - after_s
        kept = set().union(*(b.ids for b in self.live.values()))
        found = sorted(
            (r.due_at, i)
            for i, r in self.rows.items()
            if r.state == state and r.dispatched_at is not None and r.dispatched_at < cutoff and i not in kept
        )
        for _, i in found[:limit]:
            self.rows[i].state = State.IDLE
        return len(found[:limit])

    def close(self) -> None:
        """Nothing to close: no session."""

    def release_unpushed(self, entries: Sequence[Entry]) -> int:
        """Claimed but never pushed -> IDLE at once, fenced on the claim's attempt."""
        self.released.extend(entries)
        return self._give_back(entries)

    def _give_back(self, entries: Sequence[Entry]) -> int:
        done = [self.current({self.id_column: e.id, ATTEMPT_COLUMN: e.attempt}) for e in entries]
        for row in done:
            if row is not None:
                row.state = State.IDLE
        return sum(row is not None for row in done)

    @property
    def dispatched(self) -> list[Entry]:
        return self._in(State.DISPATCHED)

    @property
    def started_rows(self) -> list[Entry]:
        return self._in(State.RUNNING)

    def _in(self, state: State) -> list[Entry]:
        return [Entry(i, r.attempt) for i, r in self.rows.items() if r.state == state]

    def other(self) -> FakeStore:
        """The same table as another process sees it: one model, no connections."""
        return self


class FakeClaimStore(FakeStore):
    """For the dispatcher's tests: `due` rows, each claimed as the entry given (in that order)."""

    def __init__(self, src: SourceSettings, due: Iterable[Entry] = ()) -> None:
        super().__init__(src)
        self.add_due(due)


class FakeSweepStore(FakeStore):
    """For the sweeper's tests: `expired` rows dispatched long ago and never acked."""

    def __init__(self, src: SourceSettings, expired: int = 0) -> None:
        super().__init__(src)
        self.add_expired(expired)


class FakeWorkStore(FakeStore):
    """For the worker's tests: rows dispatched under `current` (id -> attempt)."""

    def __init__(
        self, src: SourceSettings, current: dict[int, int], columns: Iterable[str] = ("status",)
    ) -> None:
        super().__init__(src, columns)
        self.add_dispatched(current)
