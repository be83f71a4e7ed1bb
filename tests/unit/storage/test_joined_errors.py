"""The caller's connection (shared/storage/joined.py) without a server: what conn= refuses, and
mysqlclient's errors come out as duecast's, as PyMySQL's do."""

from __future__ import annotations

import sqlite3

import MySQLdb
import pytest

from duecast import DuecastError, StorageError, TransientError
from duecast.shared.storage.joined import UnknownConnection, _errors, resolve
from duecast.shared.storage.units import DuplicateKey, ValueRefused


@pytest.mark.parametrize("handle", [None, "conn", sqlite3.connect(":memory:")])
def test_anything_but_a_mysql_connection_is_refused_in_one_line(handle: object) -> None:
    with pytest.raises(UnknownConnection, match=r"^conn= takes a PyMySQL or mysqlclient") as refused:
        resolve(handle)
    assert isinstance(refused.value, DuecastError)
    assert "\n" not in str(refused.value)


@pytest.mark.parametrize(
    ("raised", "kind"),
    [
        (MySQLdb.OperationalError(2013, "Lost connection to server during query"), TransientError),
        (MySQLdb.OperationalError(1213, "Deadlock found"), TransientError),
        (MySQLdb.IntegrityError(1062, "Duplicate entry 'k' for key 'unique_slot'"), DuplicateKey),
        (MySQLdb.DataError(1406, "Data too long"), ValueRefused),
        (MySQLdb.ProgrammingError(1146, "Table 'x.nope' doesn't exist"), StorageError),
    ],
)
def test_mysqlclient_errors_are_duecasts(raised: Exception, kind: type[StorageError]) -> None:
    with pytest.raises(kind) as caught, _errors():
        raise raised
    assert type(caught.value) is kind
    assert caught.value.code == raised.args[0]
    assert caught.value.__cause__ is raised
