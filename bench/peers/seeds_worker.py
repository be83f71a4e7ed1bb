"""A worker of the seeds' pure-MySQL queue designs: claim with UPDATE ... LIMIT, read, run, DELETE. No Redis.
Also the seeds' table and connection, which the seeds driver (seeds_peer.py) shares.

`python seeds_worker.py last_insert_id` (seed 004: one row per claim, its id via LAST_INSERT_ID)
or `owner_batch` (seeds 000/001: up to 100 rows per claim, owner = CONNECTION_ID()). Autocommit,
one statement per transaction, as the seeds write it. Runs until SIGTERM.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
from collections.abc import Callable
from typing import Any

import pymysql

TABLE = "seed_jobs"

# The seeds' queue table: an owner column (NULL = free) and one composite index, (owner, id),
# that serves the claim (owner IS NULL, in id order) and the read by owner (seed 001).
DDL = f"""CREATE TABLE {TABLE} (
  id BIGINT NOT NULL AUTO_INCREMENT,
  task VARCHAR(191) NOT NULL,
  payload LONGTEXT NOT NULL,
  run_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
  owner BIGINT UNSIGNED NULL,
  claimed_at DATETIME(6) NULL,
  PRIMARY KEY (id),
  KEY owner_id (owner, id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin"""


def connect(autocommit: bool) -> pymysql.Connection[pymysql.cursors.Cursor]:
    """A session like duecast's: READ COMMITTED, utf8mb4 (the seeds name no isolation level)."""
    conn = pymysql.connect(
        host=os.environ.get("DUECAST_MYSQL__HOST", "127.0.0.1"),
        port=int(os.environ.get("DUECAST_MYSQL__PORT", "3306")),
        user=os.environ.get("DUECAST_MYSQL__USER", "root"),
        password=os.environ.get("DUECAST_MYSQL__PASSWORD", ""),
        database=os.environ["DUECAST_MYSQL__DATABASE"],
        charset="utf8mb4",
        autocommit=autocommit,
    )
    with conn.cursor() as cur:
        cur.execute("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")
    return conn


CLAIM_BATCH = 100  # seed 000's batch read; seed 001's UPDATE ... LIMIT
IDLE_SLEEP_S = 0.05  # the seeds poll: nothing claimed means sleep, then claim again
# Two workers' claims and deletes on the (owner, id) index do deadlock now and then. InnoDB rolled
# the statement back (autocommit), so the seeds' design is safe to simply run it again.
RETRY_ERRORS = (1213, 1205)  # ER_LOCK_DEADLOCK, ER_LOCK_WAIT_TIMEOUT

Rows = list[tuple[int, str, str]]
Cursor = pymysql.cursors.Cursor

# seed 004: the claim marks one row and stores its id in the session's LAST_INSERT_ID(). No ORDER
# BY: the seed orders by its due column, but an UPDATE that sets a column of the index it would
# walk in order filesorts every free row instead (~230 ms per claim at 100,000 rows).
CLAIM_ONE = (
    f"UPDATE {TABLE} SET owner = CONNECTION_ID(), claimed_at = NOW(6), id = LAST_INSERT_ID(id) "
    "WHERE owner IS NULL LIMIT 1"
)
READ_ONE = f"SELECT id, task, payload FROM {TABLE} WHERE id = LAST_INSERT_ID()"
# seeds 000/001: the claim marks up to CLAIM_BATCH rows with this connection as owner.
CLAIM_BATCH_SQL = (
    f"UPDATE {TABLE} SET owner = CONNECTION_ID(), claimed_at = NOW(6) WHERE owner IS NULL LIMIT {CLAIM_BATCH}"
)
READ_OWNED = f"SELECT id, task, payload FROM {TABLE} WHERE owner = CONNECTION_ID()"
# Both: a handled row is deleted (consume + delete), by id and still owned by us.
FINISH = f"DELETE FROM {TABLE} WHERE owner = CONNECTION_ID() AND id IN ({{ids}})"


def noop(payload: Any) -> None:
    return None


TASKS: dict[str, Callable[[Any], None]] = {"noop": noop}


def claim_one(cur: Cursor) -> Rows:
    cur.execute(CLAIM_ONE)
    if cur.rowcount == 0:  # nothing matched: LAST_INSERT_ID() still holds an old id
        return []
    cur.execute(READ_ONE)
    return list(cur.fetchall())


def claim_batch(cur: Cursor) -> Rows:
    cur.execute(CLAIM_BATCH_SQL)
    if cur.rowcount == 0:
        return []
    cur.execute(READ_OWNED)
    return list(cur.fetchall())


CLAIMS: dict[str, Callable[[Cursor], Rows]] = {"last_insert_id": claim_one, "owner_batch": claim_batch}


def work(design: str, stop: threading.Event) -> tuple[int, int]:
    """Claim, run and delete until stopped; returns (jobs done, statements retried)."""
    claim = CLAIMS[design]
    done = retried = 0
    conn = connect(autocommit=True)
    with conn.cursor() as cur:
        while not stop.is_set():
            try:
                rows = claim(cur)
                if not rows:
                    stop.wait(IDLE_SLEEP_S)
                    continue
                for _id, task, payload in rows:
                    TASKS[task](json.loads(payload))
                deleted, deadlocks = finish(cur, rows)
                done, retried = done + deleted, retried + deadlocks
            except pymysql.err.OperationalError as exc:
                if exc.args[0] not in RETRY_ERRORS:
                    raise
                retried += 1
    conn.close()
    return done, retried


def finish(cur: Cursor, rows: Rows) -> tuple[int, int]:
    """Delete the handled rows, again while it deadlocks (the rows stay ours meanwhile).

    Returns (rows deleted, retries)."""
    sql = FINISH.format(ids=",".join(str(int(r[0])) for r in rows))
    retries = 0
    while True:
        try:
            cur.execute(sql)
            return int(cur.rowcount), retries
        except pymysql.err.OperationalError as exc:
            if exc.args[0] not in RETRY_ERRORS:
                raise
            retries += 1


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1 or args[0] not in CLAIMS:
        print(f"usage: seeds_worker.py {{{'|'.join(CLAIMS)}}}", file=sys.stderr)
        return 2
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    done, retried = work(args[0], stop)
    print(f"seeds worker ({args[0]}) stopped; {done} jobs done, {retried} deadlocked statements retried")
    return 0


if __name__ == "__main__":
    sys.exit(main())
