"""The leader lease on real MariaDB: one holder at a time, renewal, hand-over on resign, takeover
after expiry (back-dated in SQL), and a leader that cannot renew stops acting before it expires."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pymysql
import pytest

from duecast.dispatcher.leader import LEADER, Leadership
from duecast.shared.settings import MySQLSettings
from duecast.shared.storage.db import Database
from duecast.shared.storage.leases import LeaseStore
from duecast.shared.storage.schema import leases_table_ddl

pytestmark = pytest.mark.integration


@pytest.fixture
def table(sql: pymysql.cursors.Cursor) -> Iterator[str]:
    name = f"leases_{uuid.uuid4().hex[:8]}"
    sql.execute(leases_table_ddl(name))
    yield name
    sql.execute(f"DROP TABLE IF EXISTS `{name}`")


def leader(mysql_settings: MySQLSettings, table: str, name: str) -> Leadership:
    return Leadership(LeaseStore(Database(mysql_settings), table), lease_s=15, holder=name)


def test_one_holder_at_a_time_and_a_resign_hands_over_at_once(
    mysql_settings: MySQLSettings, table: str
) -> None:
    a, b, c = (leader(mysql_settings, table, n) for n in "abc")
    for d in (a, b, c):
        d.tick()
    assert [d.held() for d in (a, b, c)] == [True, False, False]
    a.tick()  # renewal keeps it
    b.tick()
    assert (a.held(), b.held()) == (True, False)
    a.resign()
    assert not a.held()
    b.tick()
    c.tick()
    assert (b.held(), c.held()) == (True, False)


def test_a_standby_takes_over_when_the_leaders_lease_expires(
    mysql_settings: MySQLSettings, table: str, sql: pymysql.cursors.Cursor
) -> None:
    a, b = leader(mysql_settings, table, "a"), leader(mysql_settings, table, "b")
    a.tick()
    b.tick()
    assert not b.held()
    # The leader died 15 s ago: its lease ran out (time passes in SQL).
    sql.execute(f"UPDATE `{table}` SET expires_at = NOW(6) - INTERVAL 1 SECOND WHERE name = %s", (LEADER,))
    b.tick()
    assert b.held()
    a.tick()  # the old leader comes back: it does not get the lease back
    assert not a.held()
    sql.execute(f"SELECT holder FROM `{table}`")
    assert sql.fetchall() == (("b",),)


def test_a_failed_renewal_leaves_the_last_grant_in_force_and_never_extends_it(
    mysql_settings: MySQLSettings, table: str
) -> None:
    """A reconnect must not cost the lease (issue 16.10), nor may a failure stretch it: the leader
    acts on what the database last granted, counted down on its own clock
    (tests/faults/servers/test_leader_reconnect.py runs it out)."""
    a = leader(mysql_settings, table, "a")
    a.tick()
    until = a._until

    def unreachable(*_args: object) -> float:
        raise pymysql.err.OperationalError(2003, "Can't connect to MySQL server")

    a.store.acquire = unreachable  # type: ignore[method-assign]
    a.tick()
    assert a.held()
    assert a._until == until
