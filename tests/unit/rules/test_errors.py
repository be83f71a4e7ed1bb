"""duecast's error tree (issue 22.3): every exception class the product defines derives from the one
base, `DuecastError`; the transient branch holds MySQL's TransientError and the queue's
QueueUnavailable; the public names re-exported by `duecast` are the same classes.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest

import duecast
from duecast.shared.errors import DuecastError, TransientFailure
from duecast.shared.fanout.protocol import QueueError, QueueUnavailable
from duecast.shared.storage.units import NotConnected, StorageError, TransientError

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
