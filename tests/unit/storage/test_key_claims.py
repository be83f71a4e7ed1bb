"""Concurrency keys' claims (`[jobs.key_limits]`) without a server: the SQL's shape (a key-limited
queue's own reads scoped to no key by dc_key; every other queue's claim byte for byte as before),
and the round robin of KeyClaims against a scripted cursor: keys in turn from the last served, each
within max_running_per_key less its jobs in flight, every key at most once per claim."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from dataclasses import asdict, fields
from typing import Any

from duecast.shared.entries import Entry
from duecast.shared.queries.job_runs import render_runs, skip_tasks
from duecast.shared.queries.jobs import JOB_COLUMNS
from duecast.shared.queries.key_runs import render_key_runs, unkeyed
from duecast.shared.settings import JobsSettings, MySQLSettings
from duecast.shared.settings.limits import KeyLimits
from duecast.shared.storage.leased.jobs import JobStore
from duecast.shared.storage.leased.key_claims import KeyClaims

JOBS, RUNS, CURSORS = "duecast_jobs", "duecast_jobs_runs", "duecast_jobs_cursors"
SCOPED = {"read_ahead", "count_behind", "read_behind", "claim_idle", "jobs_in_runs"}


def test_a_key_limited_queues_own_claim_reads_its_jobs_of_no_key_only() -> None:
    runs = render_runs(JOBS, RUNS, CURSORS, JOB_COLUMNS)
    scoped = unkeyed(runs)
    for f in fields(runs):
        before, after = getattr(runs, f.name), getattr(scoped, f.name)
        if f.name in SCOPED:
            assert after != before
            assert after.count("`concurrency_key` IS NULL") == 1, f.name
            assert "dc_due" not in after, f.name
        else:
            assert after == before, f.name
    # The same ranges, on dc_key: one more equality in the index's prefix, nothing else changed.
    assert (
        scoped.read_ahead.replace(
            "FORCE INDEX (`dc_key`) WHERE `dc_state` = 0 AND `queue` = %s AND `concurrency_key` IS NULL",
            "FORCE INDEX (`dc_due`) WHERE `dc_state` = 0 AND `queue` = %s",
        )
        == runs.read_ahead
    )


def test_the_key_reads_name_dc_key_and_the_key() -> None:
    sql = render_key_runs(JOBS, RUNS)
    for name, stmt in asdict(sql).items():
        if name != "insert_run":
            assert "FORCE INDEX (`dc_key`)" in stmt, name
    assert "`concurrency_key` > %s ORDER BY `concurrency_key` LIMIT 1" in sql.next_key
    assert skip_tasks(sql.read_due, 2).count("`task` NOT IN (%s, %s)") == 1


class _Cursor:
    """Answers the statements it is sent from `answers` (a statement -> a function of its args)."""

    def __init__(self, answers: dict[str, Any]) -> None:
        self.answers = answers
        self.sent: list[tuple[str, Any]] = []
        self.rows: list[Any] = []
        self.lastrowid = 2**62

    def execute(self, stmt: str, args: Any = None) -> int:
        self.sent.append((stmt, args))
        answer = next((a for s, a in self.answers.items() if stmt.startswith(s)), None)
        self.rows = list(answer(args)) if answer else []
        self.lastrowid += 1
        return len(self.rows)

    def fetchone(self) -> Any:
        return self.rows[0] if self.rows else None

    def fetchall(self) -> list[Any]:
        return self.rows


def _keys_cursor(pending: dict[str, int], in_flight: dict[str, int]) -> _Cursor:
    """Keys with `pending[key]` due jobs (ids key-number * 1000 + i) and `in_flight[key]` jobs in
    live runs (their members not among the due jobs, for brevity)."""
    sql = render_key_runs(JOBS, RUNS)
    keys = sorted(pending)

    def after(args: Any) -> list[Any]:
        later = [k for k in keys if k > args[1]]
        return [(later[0],)] if later else []

    def due(args: Any) -> list[Any]:
        key, limit = args[1], args[-1]
        base = (keys.index(key) + 1) * 1000
        rows = [[base + i, 0, "2020-01-01 00:00:00", 0] for i in range(min(limit, pending[key]))]
        return [(len(rows), json.dumps(rows))]

    return _Cursor(
        {
            sql.next_key: after,
            sql.first_key: lambda _a: [(keys[0],)] if keys else [],
            sql.key_runs: lambda a: [(1, in_flight.get(a[1], 0), "1", 1)] if in_flight.get(a[1]) else [],
            sql.unkeyed_members: lambda _a: [],
            sql.read_due.split("{skip}")[0]: due,
        }
    )


def _claims(per_key: int) -> tuple[KeyClaims, list[tuple[str, int]]]:
    made: list[tuple[str, int]] = []

    def make_runs(_cur: Any, jobs: list[tuple[int, int, int]], key: str | None) -> list[Entry]:
        assert key is not None
        made.append((key, len(jobs)))
        return [Entry(2**62 + len(made), 1)]

    claims = KeyClaims(
        "default", per_key, render_runs(JOBS, RUNS, CURSORS, JOB_COLUMNS), render_key_runs(JOBS, RUNS)
    )
    claims.make = make_runs  # type: ignore[attr-defined]
    return claims, made


def test_keys_take_turns_across_claims_each_within_its_limit() -> None:
    claims, made = _claims(per_key=3)
    cur = _keys_cursor({"a": 100, "b": 1, "c": 5}, in_flight={})
    got = claims.claim(cur, 4, (), claims.make)  # type: ignore[attr-defined]
    assert made == [("a", 3), ("b", 1)], "a's limit, then b; the claim's 4 are used up"
    assert got.jobs == 4
    made.clear()
    claims.claim(cur, 100, (), claims.make)  # type: ignore[attr-defined]
    assert made == [("c", 3), ("a", 3), ("b", 1)], "from the key after the last served, round once"


def test_a_key_at_its_limit_is_passed_and_each_key_is_visited_once_a_claim() -> None:
    claims, made = _claims(per_key=3)
    cur = _keys_cursor({"a": 100, "b": 100}, in_flight={"a": 3, "b": 1})
    got = claims.claim(cur, 1000, (), claims.make)  # type: ignore[attr-defined]
    assert made == [("b", 2)]
    assert got.jobs == 2
    visits = [args[1] for stmt, args in cur.sent if stmt.startswith(claims.sql.key_runs)]
    assert visits == ["a", "b"], "each key once, then the claim ends"


def test_the_read_past_a_keys_own_runs_asks_for_room_plus_what_they_hold() -> None:
    claims, _ = _claims(per_key=5)
    cur = _keys_cursor({"a": 100}, in_flight={"a": 2})
    claims.claim(cur, 1000, ("paused",), claims.make)  # type: ignore[attr-defined]
    (args,) = [a for s, a in cur.sent if "JSON_ARRAYAGG" in s]
    assert args == ("default", "a", "paused", 3 + 1), "room 3, and the one id its run holds"


class _Db:
    def __init__(self, cur: _Cursor) -> None:
        self.cur = cur

    @contextlib.contextmanager
    def transaction(self, **_kw: Any) -> Iterator[_Cursor]:
        yield self.cur


def _store(jobs: JobsSettings, cur: _Cursor, queue: str = "default") -> JobStore:
    src = jobs.queue_sources()[jobs.queues.index(queue)]
    return JobStore(_Db(cur), src, jobs, MySQLSettings())  # type: ignore[arg-type]


def test_without_key_limits_a_queues_claim_sends_todays_statements_byte_for_byte() -> None:
    """No cost for those who do not use keys: the claim's statements are render_runs' own, and none
    names the key, for a queue without key limits (whether or not another queue has them)."""
    for jobs in (
        JobsSettings(queues=["default", "mail"]),
        JobsSettings(queues=["default", "mail"], key_limits={"mail": KeyLimits(max_running_per_key=2)}),
    ):
        cur = _Cursor({})
        store = _store(jobs, cur)
        assert store.keys is None
        assert store.claiming is store.runs
        for _ in range(2):  # keys first, then the queue first: the turn changes nothing here
            store._behind_at = -1e9  # a look behind the cursors too
            store.claim_due(1000)
        today = render_runs(jobs.table, jobs.runs_table, jobs.cursors_table, JOB_COLUMNS)
        known = {skip_tasks(s, 0) for s in asdict(today).values()}
        exact = {k for k in known if "{" not in k}
        formatted = [k.split("{")[0] for k in known if "{" in k]
        sent = [stmt for stmt, _ in cur.sent]
        assert sent
        for stmt in sent:
            assert stmt in exact or any(stmt.startswith(f) for f in formatted), stmt
        assert not [s for s in sent if "concurrency_key" in s or "dc_key" in s]


def test_a_key_limited_queue_claims_its_keys_and_its_jobs_of_no_key_in_turn() -> None:
    jobs = JobsSettings(key_limits={"default": KeyLimits(max_running_per_key=2)})
    cur = _Cursor({})
    store = _store(jobs, cur)
    assert store.keys is not None
    firsts = []
    for _ in range(2):
        cur.sent.clear()
        store.claim_due(1000)
        order = [
            s for s, _ in cur.sent if s.startswith((store.keys.sql.first_key, store.claiming.claim_idle))
        ]
        firsts.append("keys" if order[0].startswith(store.keys.sql.first_key) else "queue")
    assert firsts == ["keys", "queue"], "neither the keys nor the jobs of no key go first every time"
