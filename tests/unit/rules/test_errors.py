"""duecast's error tree (issue 22.3): every exception class the product defines derives from the one
base, `DuecastError`; the transient branch holds MySQL's TransientError and the queue's
QueueUnavailable; the public names re-exported by `duecast` are the same classes.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import pymysql
import pytest

import duecast
from duecast.shared.errors import DuecastError, TransientFailure
from duecast.shared.fanout.protocol import QueueError, QueueUnavailable
from duecast.shared.storage.units import NotConnected, StorageError, TransientError, translate, whole_unit

PARTS = ("shared", "worker", "dispatcher", "cli")  # integrations/ define no errors; importing
# duecast.integrations.django.worker sets a Django project up
# Modules that run something when imported (a role's or the command's entry point): nothing in them
# defines an exception class.
SKIPPED = {"__main__"}


def _modules() -> list[str]:
    names = []
    for part in PARTS:
        package = importlib.import_module(f"duecast.{part}")
        names.append(package.__name__)
        for info in pkgutil.walk_packages(package.__path__, prefix=f"{package.__name__}."):
            if info.name.rsplit(".", 1)[-1] not in SKIPPED:
                names.append(info.name)
    return names


def _exception_classes() -> list[type[BaseException]]:
    found = []
    for name in _modules():
        module = importlib.import_module(name)
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if issubclass(cls, BaseException) and cls.__module__ == name:
                found.append(cls)
    return found


def test_the_walk_finds_the_errors_it_is_meant_to_check() -> None:
    names = {cls.__name__ for cls in _exception_classes()}
    # One per part at least, so a walk that silently finds nothing cannot pass.
    assert {"StorageError", "BadEntry", "QueueError", "StartupError", "SchemaError"} <= names
    assert {"TimedOut", "LostMember"} <= names  # worker/
    assert len(names) >= 20


@pytest.mark.parametrize("cls", _exception_classes(), ids=lambda cls: f"{cls.__module__}.{cls.__name__}")
def test_every_exception_class_derives_from_the_one_base(cls: type[BaseException]) -> None:
    assert issubclass(cls, DuecastError), f"{cls.__module__}.{cls.__name__} is not a DuecastError"


def test_mysql_and_redis_transient_errors_share_the_transient_branch() -> None:
    assert issubclass(TransientError, TransientFailure)
    assert issubclass(NotConnected, TransientFailure)
    assert issubclass(QueueUnavailable, TransientFailure)
    # The branch does not blur the sides: a Redis error is not a storage error, nor the reverse.
    assert not issubclass(QueueUnavailable, StorageError)
    assert not issubclass(TransientError, QueueError)
    assert not issubclass(StorageError, TransientFailure)
    assert not issubclass(QueueError, TransientFailure)


def test_the_public_errors_are_duecast_errors_and_keep_their_old_bases() -> None:
    assert duecast.DuecastError is DuecastError
    names = ("NotConnected", "StorageError", "TransientError", "EnqueueError", "DuplicateJob", "PublishError")
    for name in names:
        assert issubclass(getattr(duecast, name), DuecastError), name
    # Callers that caught the builtin bases before the tree existed still catch them.
    assert issubclass(duecast.EnqueueError, ValueError)
    assert issubclass(duecast.DuplicateJob, duecast.EnqueueError)
    assert issubclass(duecast.PublishError, ValueError)
    assert issubclass(duecast.NotConnected, duecast.TransientError)
    assert issubclass(duecast.TransientError, duecast.StorageError)


# What the driver raised when a test's private mariadbd, starting beside the shared server, deleted
# the shared server's temporary table from /tmp under a worker's query.
TEMP_FILE_GONE = "Error on delete of '/tmp/#sql-temptable-ecf-5e6f-3ff.MAI' (Errcode: 2)"


@pytest.mark.parametrize(
    "error",
    [
        pymysql.err.InternalError(6, TEMP_FILE_GONE),
        pymysql.err.OperationalError(3, "Error writing file '/tmp/MYfd=77' (Errcode: 28)"),
        pymysql.err.OperationalError(1021, "Disk full (/tmp/#sql_1.MAI); waiting for someone to free space"),
        pymysql.err.OperationalError(1041, "Out of memory."),
    ],
    ids=["temp-file-deleted", "write-failed", "disk-full", "out-of-memory"],
)
def test_the_servers_file_and_memory_faults_are_its_state_not_the_statements(error: Exception) -> None:
    """Retried like a lost connection (a WARNING line, not a traceback), and never one row's refusal."""
    mine = translate(error)
    assert isinstance(mine, TransientError), mine
    assert mine.code == error.args[0]
    assert whole_unit(error)


@pytest.mark.parametrize(
    "error",
    [
        pymysql.err.OperationalError(1054, "Unknown column 'x' in 'field list'"),
        pymysql.err.OperationalError(22, "Character set 'nope' is not a compiled character set"),
        pymysql.err.ProgrammingError(1146, "Table 'db.t' doesn't exist"),
    ],
    ids=["unknown-column", "unknown-charset", "no-table"],
)
def test_a_statements_own_fault_is_not_retried_as_the_servers(error: Exception) -> None:
    assert not isinstance(translate(error), TransientError)
    assert not whole_unit(error)
