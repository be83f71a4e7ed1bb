"""A key-limited queue's claim of its keyed jobs (`[jobs.key_limits.<queue>]`): its keys in turn
(round robin, from the one after the last served), each up to max_running_per_key less its jobs in
flight: its pending runs, then its due jobs no run holds, into runs naming the key. Runs in the
queue's claim transaction, under the queue's cursors' lock: claims of a queue never overlap, so
what one counts in flight no other claim changes meanwhile (READ COMMITTED: each read is fresh)."""

from __future__ import annotations

from dataclasses import dataclass, field

from ...entries import Entry
from ...queries.job_runs import RunSQL, skip_tasks
from ...queries.jobs import IDLE
from ...queries.key_runs import KeyRunSQL
from ...queries.source import in_list
from ..packed import read_packed
from ..units import Cursor, StorageError
from .members import member_ranges
from .runs import RUN_KEY
from .task_claims import MakeRuns, held_by

# Keys one claim visits at most: each costs 2-4 index reads (~1 ms), under the queue's cursors'
# lock. The next claim goes on from where this one stopped, so every key's turn comes.
KEYS_PER_CLAIM = 64


@dataclass
class KeyClaim:
    """What one claim's keys took: runs coming back (pending, given back), fresh runs, their jobs."""

    back: list[Entry] = field(default_factory=list)
    fresh: list[Entry] = field(default_factory=list)
    jobs: int = 0


@dataclass
class _KeyRuns:
    """One key's runs as read: its jobs in flight, whether any is pending, what they hold."""

    in_flight: int = 0
    pending: bool = False
    held: list[tuple[int, int]] = field(default_factory=list)
    own: int = 0  # jobs its runs hold


class KeyClaims:
    """The key claims of one queue; `make_runs(cur, jobs, key)` inserts runs naming the key."""

    def __init__(self, queue: str, per_key: int, runs: RunSQL, sql: KeyRunSQL) -> None:
        self.queue = queue
        self.per_key = per_key
        self.runs = runs
        self.sql = sql
        self.after: str | None = None  # the last key served: the next claim starts after it
        self._skip: tuple[str, ...] = ()  # this claim's paused tasks
        self._make_runs: MakeRuns | None = None  # this claim's JobStore._make_runs

    def claim(self, cur: Cursor, limit: int, skip: tuple[str, ...], make_runs: MakeRuns) -> KeyClaim:
        """Up to `limit` jobs of the queue's keys, each key within its limit, keys in turn."""
        got = KeyClaim()
        self._skip, self._make_runs = skip, make_runs
        visited: set[str] = set()
        unkeyed: list[tuple[int, int]] | None = None  # read once, when a key first has room
        while got.jobs < limit and len(visited) < KEYS_PER_CLAIM:
            key = self._next(cur)
            if key is None or key in visited:
                break  # no key with a pending job, or every one had its turn in this claim
            visited.add(key)
            self.after = key
            runs = self._key_runs(cur, key)
            room = min(self.per_key - runs.in_flight, limit - got.jobs)
            if room <= 0:
                continue
            if unkeyed is None:
                unkeyed = self._unkeyed(cur)
            runs.held = sorted(runs.held + unkeyed)
            self._take(cur, key, room, runs, got)
        return got

    def _next(self, cur: Cursor) -> str | None:
        """The key after the last served, or the first (a new round); None: no keyed job pending."""
        if self.after is not None:
            cur.execute(self.sql.next_key, (self.queue, self.after))
            row = cur.fetchone()
            if row is not None:
                return str(row[0])
        cur.execute(self.sql.first_key, (self.queue,))
        row = cur.fetchone()
        return None if row is None else str(row[0])

    def _key_runs(self, cur: Cursor, key: str) -> _KeyRuns:
        cur.execute(self.sql.key_runs, (self.queue, key))
        out = _KeyRuns()
        for state, jobs, members, live in cur.fetchall():
            out.pending = out.pending or int(state) == IDLE
            out.in_flight += int(jobs) if int(live) else 0
            ranges = member_ranges(members)
            out.held += ranges
            out.own += sum(hi - lo + 1 for lo, hi in ranges)
        return out

    def _unkeyed(self, cur: Cursor) -> list[tuple[int, int]]:
        cur.execute(self.sql.unkeyed_members, (self.queue,))
        held: list[tuple[int, int]] = []
        for (members,) in cur.fetchall():
            held += member_ranges(members)
        return held

    def _take(self, cur: Cursor, key: str, room: int, runs: _KeyRuns, got: KeyClaim) -> None:
        """The key's pending runs that fit (a run given back is taken whole), then its due jobs no
        run holds (`runs.held`, sorted), up to `room`."""
        assert self._make_runs is not None
        if runs.pending:
            cur.execute(self.sql.claim_idle, (self.queue, key))
            fits: list[tuple[int, int]] = []
            for i, a, n in cur.fetchall():
                # One larger than the limit itself (made before it was lowered) goes alone, when
                # none of the key's jobs is in flight: else it would wait for ever.
                alone = runs.in_flight == 0 and not fits and int(n) > self.per_key
                if int(n) <= room or alone:
                    fits.append((int(i), int(a)))
                    room -= int(n)
                    got.jobs += int(n)
            if fits:
                cur.execute(self.runs.mark_dispatched.format(ids=in_list(RUN_KEY, (i for i, _ in fits))))
                got.back += [Entry(i, a + 1) for i, a in fits]
        if room <= 0:
            return
        # Its own runs' members are among its earliest due jobs: read past them.
        args = (self.queue, key, *self._skip, room + runs.own)
        read = skip_tasks(self.sql.read_due, len(self._skip))
        packed = read_packed(cur, read, args, what="a key's due jobs")
        if packed is None:
            raise StorageError(
                "a claim's packed read of a key's due jobs was cut short by the server "
                "(max_allowed_packet); raise it, or lower jobs.key_limits' max_running_per_key"
            )
        rows = sorted((int(p), str(at), int(i), int(n)) for i, p, at, n in packed)  # claim order
        jobs = [(i, p, n) for p, _, i, n in rows if not held_by(runs.held, i)][:room]
        got.fresh += self._make_runs(cur, jobs, key)
        got.jobs += len(jobs)
