"""A real InnoDB deadlock with a worker starting its batch, for the MySQL chaos scenario.

A rival session writes ballast rows first (InnoDB rolls back the transaction that changed fewer rows,
so the worker is the victim), locks the newest dispatched job, waits until a worker's start waits
for that row (INNODB_LOCK_WAITS), and asks for the first job of the waiting worker's batch, which
the worker locked before (ids are locked in order): a cycle. The worker must retry its unit.
"""

from __future__ import annotations

import re
import time
import uuid

import pymysql

from duecast.shared.states import State
from duecast.shared.storage.db import connect
from tests.chaos.harness import Chaos

_FIRST_ID = re.compile(r"`id` IN \((\d+)")
POLL_S = 0.2  # MariaDB refreshes its INNODB_* tables only when they were not read for 100 ms


def force_deadlock(chaos: Chaos, timeout_s: float = 10.0) -> bool:
    """True when the rival closed a cycle with a waiting worker (InnoDB then rolls one back)."""
    ballast = f"chaos_ballast_{uuid.uuid4().hex[:8]}"
    chaos.query(f"CREATE TABLE `{ballast}` (id INT AUTO_INCREMENT PRIMARY KEY, pad CHAR(8) NOT NULL)")
    conn = connect(chaos.mysql)
    try:
        with conn.cursor() as cur:
            cur.execute(f"INSERT INTO `{ballast}` (pad) SELECT 'x' FROM seq_1_to_1000")
            cur.execute(
                f"SELECT id FROM `{chaos.table}` WHERE dc_state = %s ORDER BY id DESC LIMIT 1 "
                "FOR UPDATE SKIP LOCKED",
                (int(State.DISPATCHED),),
            )
            if cur.fetchone() is None:
                return False
            cur.execute(
                "SELECT trx_id FROM information_schema.INNODB_TRX WHERE trx_mysql_thread_id = CONNECTION_ID()"
            )
            (trx,) = cur.fetchone() or (None,)
            first = _first_of_waiting_batch(chaos, trx, time.monotonic() + timeout_s)
            if first is None:
                return False
            chaos.fault("mysql_deadlock")
            try:
                cur.execute(f"SELECT id FROM `{chaos.table}` WHERE id = %s FOR UPDATE", (first,))
            except pymysql.err.OperationalError:  # the rival lost after all (or waited too long)
                return False
            return True
    finally:
        conn.rollback()
        conn.close()
        chaos.query(f"DROP TABLE IF EXISTS `{ballast}`")


def _first_of_waiting_batch(chaos: Chaos, trx: object, deadline: float) -> int | None:
    """The first job id in the start statement of a worker waiting for the rival's lock."""
    while time.monotonic() < deadline:
        rows = chaos.query(
            "SELECT r.trx_query FROM information_schema.INNODB_LOCK_WAITS w "
            "JOIN information_schema.INNODB_TRX r ON r.trx_id = w.requesting_trx_id "
            "WHERE w.blocking_trx_id = %s",
            (trx,),
        )
        for (query,) in rows:
            found = _FIRST_ID.search(str(query or ""))
            if found:
                return int(found.group(1))
        time.sleep(POLL_S)
    return None
