"""Issue 12.5: a lock held past mysql.lock_wait_s on what the dispatcher needs at start-up (range
discovery, the leader lease) is waited out in one-line retries, never the end of the dispatcher;
and range discovery does not wait on the ranges a worker holds at all. Before, the dispatcher died
at start-up with a raw `(1205, 'Lock wait timeout exceeded')` traceback and dispatched nothing more.

The real dispatcher process; the locks are a test session's, held in an open transaction.
"""

from __future__ import annotations

import signal
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pymysql
import pytest

from duecast.dispatcher.leader import LEADER
from duecast.shared.process.failures import EXIT_UNAVAILABLE
from duecast.shared.process.runtime import build_stores
from duecast.shared.queries.ranges import ranges_table
from duecast.shared.settings import DispatcherSettings, MySQLSettings, RedisSettings, Settings
from duecast.shared.storage.admin import migrate
from tests.faults.env import WAIT_S, _child_env
from tests.faults.procs import Proc, Procs, wait_for
from tests.integration import range_app

pytestmark = pytest.mark.faults

USERS = 250  # spans [0,100) [100,200) [200,300): three ranges
LOCK_WAIT_S = 1  # mysql.lock_wait_s of the dispatcher: each retry below is one wait this long
RETRY_LINE = "start-up: range discovery hit (1205, 'Lock wait timeout exceeded"


@dataclass
class Ranged:
    settings: Settings
    ranges: str  # the ranges table
    env: dict[str, str]  # the dispatcher's environment
    sql: pymysql.cursors.Cursor  # autocommit
    procs: Procs

    def dispatcher(self) -> Proc:
        # The leader's renewal logs its cause's class name (TransientError) on its one line.
        args = ["-m", "duecast.dispatcher"]
        return self.procs.spawn("dispatcher", args, self.env, allow=["TransientError"])

    def dispatched(self) -> int:
        self.sql.execute(f"SELECT COUNT(*) FROM `{self.ranges}` WHERE dc_state = 1")
        row = self.sql.fetchone()
        return int(row[0]) if row else 0

    def wait_for(self, pred: Callable[[], object], what: str, timeout: float = WAIT_S) -> None:
        wait_for(pred, timeout, what, check=self.procs.check)


def log_of(proc: Proc) -> str:
    return proc.log.read_text(errors="replace")


@pytest.fixture
def ranged(
    mysql_settings: MySQLSettings, redis_settings: RedisSettings, sql: pymysql.cursors.Cursor, procs: Procs
) -> Iterator[Ranged]:
    """A range-mode source over a fresh table of USERS users, migrated, and the dispatcher's settings."""
    src = range_app.users_source(sql, USERS)
    settings = Settings(
        mysql=mysql_settings,
        redis=redis_settings,
        sources=[src],
        jobs={"enabled": False},
    )
    migrate.apply(settings)
    leases = DispatcherSettings().leases_table
    sql.execute(f"DELETE FROM `{leases}`")  # no earlier test's leader stands in the way
    env = _child_env(mysql_settings, redis_settings, src)
    env.update({"DUECAST_MYSQL__LOCK_WAIT_S": str(LOCK_WAIT_S), "DUECAST_DISPATCHER__LEADER_LEASE_S": "3"})
    yield Ranged(settings, ranges_table(src), env, sql, procs)
    procs.kill_all()  # before dropping what it uses
    sql.execute(f"DELETE FROM `{leases}`")
    sql.execute(f"DROP TABLE IF EXISTS `{src.table}`, `{ranges_table(src)}`")


def test_discovery_does_not_wait_on_a_range_a_worker_holds(
    ranged: Ranged, holder: pymysql.cursors.Cursor
) -> None:
    (store,) = build_stores(ranged.settings, ranged.settings.sources)
    assert store.discover(full=True) == 3  # type: ignore[attr-defined]
    # As a worker's open batch holds its range (the failure: 2 s checks under 256 threads).
    holder.execute(f"SELECT * FROM `{ranged.ranges}` WHERE range_id = 1 FOR UPDATE")

    proc = ranged.dispatcher()

    ranged.wait_for(lambda: ranged.dispatched() == 2, "the two ranges nobody holds to be dispatched")
    text = log_of(proc)
    assert "Lock wait timeout" not in text  # the full discovery at start-up never waited
    assert "Traceback" not in text
    assert proc.alive()


def test_the_dispatcher_survives_a_lock_held_on_its_discovery_past_the_lock_wait(
    ranged: Ranged, holder: pymysql.cursors.Cursor
) -> None:
    # A range being inserted by a session that does not commit (as a second dispatcher's discovery
    # stalled mid-way): this dispatcher's discovery must wait for it, past mysql.lock_wait_s.
    holder.execute(f"INSERT INTO `{ranged.ranges}` (range_id, lo, hi, checked_at) VALUES (1, 0, 100, NOW())")

    proc = ranged.dispatcher()

    ranged.wait_for(lambda: log_of(proc).count(RETRY_LINE) >= 2, "two one-line retries of the discovery")
    text = log_of(proc)
    retries = [line for line in text.splitlines() if RETRY_LINE in line]
    assert all(" WARNING " in line and "; retrying (retry " in line for line in retries), retries
    assert "Traceback" not in text
    assert proc.alive()
    assert ranged.dispatched() == 0  # nothing is claimed before the first discovery is done

    holder.connection.rollback()

    ranged.wait_for(lambda: ranged.dispatched() == 3, "every range to be discovered and dispatched")
    assert "Traceback" not in log_of(proc)


def test_a_stop_request_while_discovery_waits_ends_the_start_in_one_line(
    ranged: Ranged, holder: pymysql.cursors.Cursor
) -> None:
    holder.execute(f"INSERT INTO `{ranged.ranges}` (range_id, lo, hi, checked_at) VALUES (1, 0, 100, NOW())")
    proc = ranged.dispatcher()
    ranged.wait_for(lambda: RETRY_LINE in log_of(proc), "a retry of the discovery")

    ranged.procs.signal(proc, signal.SIGTERM)

    assert ranged.procs.wait_exit(proc, WAIT_S) == EXIT_UNAVAILABLE
    text = log_of(proc)
    assert "Traceback" not in text
    assert text.splitlines()[-1].startswith(
        "duecast dispatcher: stopped during start-up while range discovery kept failing: "
        "TransientError: (1205"
    )


def test_the_dispatcher_survives_a_lock_held_on_the_leader_lease(
    ranged: Ranged, holder: pymysql.cursors.Cursor
) -> None:
    leases = DispatcherSettings().leases_table
    ranged.sql.execute(
        f"INSERT INTO `{leases}` (name, holder, expires_at) VALUES (%s, 'gone', NOW(6))", (LEADER,)
    )
    holder.execute(f"SELECT * FROM `{leases}` WHERE name = %s FOR UPDATE", (LEADER,))

    proc = ranged.dispatcher()

    # It stands by, one line per failed renewal, and claims meanwhile: claiming needs no lease.
    ranged.wait_for(lambda: ranged.dispatched() == 3, "the ranges to be dispatched while the lease is locked")
    text = log_of(proc)
    failed = [line for line in text.splitlines() if "could not renew the leader lease" in line]
    assert failed
    assert all(" WARNING " in line and "TransientError: (1205" in line for line in failed), failed
    assert "Traceback" not in text
    assert "now the dispatcher leader" not in text

    holder.connection.rollback()

    ranged.wait_for(lambda: "now the dispatcher leader" in log_of(proc), "the dispatcher to lead")
    ranged.sql.execute(f"SELECT holder FROM `{leases}` WHERE name = %s", (LEADER,))
    assert ranged.sql.fetchone() != ("gone",)
    assert "Traceback" not in log_of(proc)
