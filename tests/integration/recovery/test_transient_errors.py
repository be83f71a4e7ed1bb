"""MySQL faults inside a worker's unit of work, on real MariaDB: a connection killed between the
handler and the ack, and a deadlock, are retried as a unit; the ack's outcome is resolved by locking
the rows again under their fence, and no handler runs twice for one attempt."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import cast

import pymysql
import pytest

from duecast.shared.acks import Ack, Row
from duecast.shared.api.handlers import Handler
from duecast.shared.settings import WorkerSettings
from duecast.shared.storage.source_store import SourceStore, Store
from duecast.worker.worker import Worker
from tests.integration.conftest import Env

pytestmark = pytest.mark.integration


def _worker(env: Env, fn: Callable[[Row], Ack | None]) -> Worker:
    handler = Handler(env.source.name, fn, batch=False)
    settings = WorkerSettings(block_timeout_s=0.1)
    return Worker(
        {env.source.name: cast(Store, env.store)},
        {env.source.name: handler},
        env.queue,
        settings,
    )


def _connection_id(store: SourceStore) -> int:
    conn = store.db._conn
    assert conn is not None
    return int(conn.thread_id())


@pytest.mark.parametrize("fault", ["connection_killed", "deadlock"])
def test_a_unit_hit_by_a_transient_error_is_retried_without_running_handlers_again(
    make_env: Callable[..., Env], fault: str, sql: pymysql.cursors.Cursor
) -> None:
    env = make_env("rescan", rows=20)
    entries = env.store.claim_due(100)
    env.queue.push(env.source.name, entries)
    runs: Counter[int] = Counter()
    faulted = []

    def handle(row: Row) -> Ack:
        runs[int(row[env.id_column])] += 1
        if not faulted:
            faulted.append(True)
            if fault == "connection_killed":
                sql.execute(f"KILL CONNECTION {_connection_id(env.store)}")
            else:  # InnoDB picks the worker's transaction as the deadlock victim: make it lose
                raise pymysql.err.OperationalError(1213, "Deadlock found when trying to get lock")
        return Ack.touch(status=7)

    worker = _worker(env, handle)
    if fault == "deadlock":
        # A deadlock surfaces from a statement, not a handler: raise it from the ack.
        original = env.store.run_ack
        calls = []

        def deadlocking_ack(cur: pymysql.cursors.Cursor, key: object, rows: list[Row]) -> int:
            if not calls:
                calls.append(True)
                raise pymysql.err.OperationalError(1213, "Deadlock found when trying to get lock")
            return original(cur, key, rows)

        env.store.run_ack = deadlocking_ack  # type: ignore[method-assign]
        faulted.append(True)
    while not worker.tick().idle:
        pass
    worker.close()

    assert runs == Counter(dict.fromkeys(range(1, 21), 1))  # once each, despite the retry
    assert env.states() == dict.fromkeys(range(1, 21), (0, 1))  # all acked under attempt 1
    assert env.count("status = 7") == 20
