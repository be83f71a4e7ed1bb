"""duecast's error tree: the one base every error duecast raises on purpose derives from, and the
transient branch that MySQL's and Redis' passing failures share. Names only: each layer defines its
errors beside the code that raises them (storage/units.py, fanout/protocol.py...), under these.
"""

from __future__ import annotations


class DuecastError(Exception):
    """Every error duecast defines derives from this (tests/unit/rules/test_errors.py walks them):
    `except DuecastError` catches duecast's refusals and failures, never a bug or a driver's error.
    Errors that were ValueError, RuntimeError or TimeoutError before the tree existed still are."""


class TransientFailure(DuecastError):
    """The transient branch: what failed may succeed if the whole unit runs again (a server down or
    restarting, a connection lost, a deadlock). MySQL's `storage.units.TransientError` and the queue's
    `fanout.protocol.QueueUnavailable` are both here, so one name covers either."""
