"""Concurrency keys (`[jobs.key_limits.<queue>]`) at claim time on real MariaDB: a key-limited queue's
keyed jobs are claimed key by key, in turn, into runs naming the key, at most max_running_per_key of
a key in flight (dispatched, or started under a live lease); its jobs of no key keep the queue's own
claim; each read is an index range of dc_key; another queue's claim is unchanged."""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Iterator
from dataclasses import asdict
from typing import Any

import pytest
from rich.console import Console

from duecast.cli.status_limits import key_limits_table
from duecast.shared.api.enqueue import Job
from duecast.shared.process.runtime import build_stores
from duecast.shared.queries.job_runs import skip_tasks
from duecast.shared.queries.key_status import JOBS_READ, RUNS_READ, render_key_status
from duecast.shared.settings.limits import KeyLimits
from duecast.shared.storage.admin import migrate
from duecast.shared.storage.key_status import read_key_limits
from duecast.shared.storage.leased.jobs import JobStore
from duecast.shared.storage.leased.members import decode_members
from duecast.shared.storage.schema import SchemaError, check_jobs_table
from tests.integration.jobs.jobs_env import JobsEnv

pytestmark = pytest.mark.integration


def _keyed(env: JobsEnv, per_key: int, run_size: int = 4) -> tuple[JobsEnv, dict[str, JobStore]]:
    # model_copy does not validate: the limits as the settings would hold them.
    limited = env.with_jobs(run_size=run_size, key_limits={"default": KeyLimits(max_running_per_key=per_key)})
    migrate.apply(limited.settings)  # dc_key on the jobs table, where keys are limited
    stores = build_stores(limited.settings, limited.settings.all_sources())
    return limited, {s.queue: s for s in stores if isinstance(s, JobStore)}


def _enqueue(env: JobsEnv, key: str | None, n: int, queue: str = "default") -> list[int]:
    ids = env.enqueuer.enqueue_many(Job("record", i, queue=queue, concurrency_key=key) for i in range(n))
    return [int(i) for i in ids]


def _in_runs(env: JobsEnv) -> Counter[str | None]:
    """Jobs in runs, by the runs' key."""
    out: Counter[str | None] = Counter()
    for key, jobs in env.runs("concurrency_key", "jobs"):
        out[key] += int(jobs)
    return out


def test_each_key_gets_its_limit_and_jobs_of_no_key_the_queues_claim(env: JobsEnv) -> None:
    limited, stores = _keyed(env, per_key=3)
    _enqueue(limited, "acct-a", 20)
    _enqueue(limited, "acct-b", 2)
    _enqueue(limited, None, 10)
    store = stores["default"]
    store.claim_due(1000)
    assert _in_runs(limited) == {"acct-a": 3, "acct-b": 2, None: 10}
    # Each run holds one key's jobs only, and names it.
    for members, key in limited.runs("members", "concurrency_key"):
        assert {limited.job(i, "concurrency_key")[0] for i in decode_members(members)} == {key}
    assert store.claim_due(1000) == [], "every key is at its limit or has nothing due"
    # The other queue is not key-limited: its keyed jobs go by its own claim, in order.
    other = stores["critical"]
    assert other.keys is None
    _enqueue(limited, "acct-a", 5, queue="critical")
    other.claim_due(1000)
    assert _in_runs(limited)[None] == 15


def test_a_keys_slots_come_back_when_its_jobs_finish_or_its_leases_run_out(env: JobsEnv) -> None:
    limited, stores = _keyed(env, per_key=4)
    ids = _enqueue(limited, "acct-a", 12)
    store = stores["default"]
    store.claim_due(1000)
    runs = limited.settings.jobs.runs_table
    # Dispatched long ago and never started: still counted (a worker may start it yet), until the
    # sweeper makes it pending again.
    limited.sql.execute(f"UPDATE `{runs}` SET dc_dispatched_at = NOW(6) - INTERVAL 1 DAY")
    assert store.claim_due(1000) == []
    # Started by a worker that died: its jobs stop counting when the lease runs out.
    limited.sql.execute(f"UPDATE `{runs}` SET dc_state = 2, lease_until = NOW(6) - INTERVAL 1 SECOND")
    store.claim_due(1000)
    live = [(k, n) for k, n, st in limited.runs("concurrency_key", "jobs", "dc_state") if st == 1]
    assert sum(n for _, n in live) == 4, "the next 4, not the dead run's members again"
    held = {i for (m,) in limited.runs("members") for i in decode_members(m)}
    assert held == set(ids[:8])


def test_a_keys_run_given_back_is_claimed_whole_when_it_fits(env: JobsEnv) -> None:
    limited, stores = _keyed(env, per_key=3)
    _enqueue(limited, "acct-a", 3)
    store = stores["default"]
    store.claim_due(1000)
    runs = limited.settings.jobs.runs_table
    limited.sql.execute(f"UPDATE `{runs}` SET dc_state = 0")  # given back (its entry was lost)
    _enqueue(limited, "acct-a", 3)
    entries = store.claim_due(1000)
    assert store.returning == 1, "the run given back comes back"
    assert len(entries) == 1, "and nothing beyond the limit"
    assert limited.runs("concurrency_key", "jobs", "dc_state") == [("acct-a", 3, 1)]


def test_a_run_larger_than_a_lowered_limit_goes_alone(env: JobsEnv) -> None:
    limited, stores = _keyed(env, per_key=5, run_size=10)
    _enqueue(limited, "acct-a", 8)
    stores["default"].claim_due(1000)
    runs = limited.settings.jobs.runs_table
    limited.sql.execute(f"UPDATE `{runs}` SET dc_state = 0")  # given back
    lowered, stores = _keyed(env, per_key=3, run_size=10)  # the same tables, the limit lowered
    entries = stores["default"].claim_due(1000)
    assert [(n, st) for n, st in lowered.runs("jobs", "dc_state")] == [(5, 1)], (
        "whole, when nothing else runs"
    )
    assert len(entries) == 1
    assert stores["default"].claim_due(1000) == [], "and nothing beside it"


def test_keys_are_served_in_turn_across_claims(env: JobsEnv) -> None:
    limited, stores = _keyed(env, per_key=2, run_size=2)
    for key in ("k3", "k1", "k4", "k2"):
        _enqueue(limited, key, 6)
    store = stores["default"]
    for _ in range(5):  # claims of 2 jobs: a key's turn each, in key order
        store.claim_due(2)
    assert [k for (k,) in limited.runs("concurrency_key")] == ["k1", "k2", "k3", "k4"], "the 5th: all full"
    runs = limited.settings.jobs.runs_table
    limited.sql.execute(f"DELETE FROM `{runs}` WHERE concurrency_key IN ('k1', 'k3')")  # as if finished
    store.claim_due(2)
    store.claim_due(2)
    assert [k for (k,) in limited.runs("concurrency_key")][-2:] == ["k1", "k3"], "a new round, from the first"


def _plan(env: JobsEnv, stmt: str, args: tuple[Any, ...]) -> list[dict[str, Any]]:
    env.sql.execute("EXPLAIN " + stmt, args)
    cols = [d[0] for d in env.sql.description]
    return [dict(zip(cols, row, strict=True)) for row in env.sql.fetchall()]


def test_the_key_reads_are_ranges_of_dc_key(env: JobsEnv) -> None:
    limited, stores = _keyed(env, per_key=5)
    store = stores["default"]
    assert store.keys is not None
    sql = store.keys.sql
    for stmt, args in (
        (sql.next_key, ("default", "acct-a")),
        (sql.first_key, ("default",)),
        (skip_tasks(sql.read_due, 0).split("FROM (", 1)[1].rsplit(") AS", 1)[0], ("default", "acct-a", 10)),
        (sql.key_runs, ("default", "acct-a")),
    ):
        plan = _plan(limited, stmt, args)
        assert any(p["key"] == "dc_key" for p in plan), (stmt, plan)
    inner = skip_tasks(store.claiming.read_ahead, 0).split("FROM (", 1)[1].rsplit(") AS", 1)[0]
    cursors = [x for _ in range(10) for x in ("1000-01-01", "1000-01-01", 0)]
    plan = _plan(limited, inner, ("default", *cursors, 10))
    assert [p["key"] for p in plan] == ["dc_key"], plan
    assert plan[0]["type"] == "range", plan


def test_key_limits_need_the_runs_tables_key_column(env: JobsEnv) -> None:
    limited, _ = _keyed(env, per_key=1)
    runs = limited.settings.jobs.runs_table
    limited.sql.execute(f"ALTER TABLE `{runs}` DROP INDEX `dc_key`, DROP COLUMN `concurrency_key`")
    limited.sql.execute(f"ALTER TABLE `{limited.table}` DROP INDEX `dc_key`, DROP COLUMN `concurrency_key`")
    with pytest.raises(SchemaError, match=r"run `duecast migrate`"):
        check_jobs_table(limited.sql, limited.settings.jobs)
    migrate.apply(limited.settings)
    check_jobs_table(limited.sql, limited.settings.jobs)


def _recorded(store: JobStore) -> list[str]:
    """The statements the store's units run from now on, as sent (before their arguments)."""
    seen: list[str] = []
    real = store.db.transaction

    @contextlib.contextmanager
    def recording(**kw: Any) -> Iterator[Any]:
        with real(**kw) as cur:
            execute = cur.execute

            def record(stmt: str, args: Any = None) -> Any:
                seen.append(stmt)
                return execute(stmt, args)

            cur.execute = record  # type: ignore[method-assign]
            yield cur

    store.db.transaction = recording  # type: ignore[method-assign]
    return seen


def test_without_key_limits_the_queues_claim_is_as_before(env: JobsEnv) -> None:
    """No key limited: keyed jobs are claimed by the queue's own statements, byte for byte."""
    plain = env.with_jobs(run_size=4)
    store = plain.store()
    assert store.keys is None
    assert store.claiming is store.runs
    _enqueue(plain, "acct-a", 10)
    seen = _recorded(store)
    store.claim_due(1000)
    plain.sql.execute(f"UPDATE `{plain.settings.jobs.runs_table}` SET dc_state = 0")  # given back
    store._behind_at = -1e9  # and a look behind the cursors
    store.claim_due(1000)
    known = {skip_tasks(stmt, 0) for stmt in asdict(store.runs).values()}
    exact = {k for k in known if "{" not in k}
    formatted = [k.split("{")[0] for k in known if "{" in k]
    assert seen
    for stmt in seen:
        assert stmt in exact or any(stmt.startswith(f) for f in formatted), stmt
    assert not [stmt for stmt in seen if "concurrency_key" in stmt]
    assert sum(n for (n,) in plain.runs("jobs")) == 10


def test_status_shows_each_keys_jobs_in_flight_by_ranges_of_dc_key(env: JobsEnv) -> None:
    limited, stores = _keyed(env, per_key=3)
    _enqueue(limited, "acct-a", 5)
    _enqueue(limited, "acct-b", 1)
    _enqueue(limited, None, 2)
    stores["default"].claim_due(1000)
    jobs = limited.settings.jobs
    (state,) = read_key_limits(stores["default"].db, jobs)
    assert (state.queue, state.max_running_per_key) == ("default", 3)
    assert state.busiest == [("acct-a", 3), ("acct-b", 1)], "runs of no key are not a key's"
    # Pending: acct-a's 2 left, and acct-b's job, in a run not finished yet (its row is still pending).
    assert (state.keys_in_flight, state.keys_pending, state.partial) == (2, 2, False)
    console = Console(width=200, record=True)
    console.print(key_limits_table([state]))
    shown = [[c.strip() for c in ln.split("│")[1:4]] for ln in console.export_text().splitlines()]
    assert ["default", "acct-a", "3/3"] in shown
    assert ["default", "acct-b", "1/3"] in shown
    # A dead worker's run stops counting when its lease runs out, as the claim counts it.
    limited.sql.execute(
        f"UPDATE `{jobs.runs_table}` SET dc_state = 2, lease_until = NOW(6) - INTERVAL 1 SECOND "
        "WHERE concurrency_key = 'acct-a'"
    )
    (state,) = read_key_limits(stores["default"].db, jobs)
    assert (state.busiest, state.keys_in_flight) == ([("acct-b", 1)], 1)
    sql = render_key_status(jobs.table, jobs.runs_table)
    for stmt, args in (
        (sql.busiest, ("default", RUNS_READ, 5)),
        (sql.keys_pending, ("default", JOBS_READ)),
    ):
        read = [p for p in _plan(limited, stmt, args) if p["table"] in (jobs.table, jobs.runs_table)]
        assert [(p["key"], p["type"]) for p in read] == [("dc_key", "range")], read
