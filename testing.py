"""`duecast.testing`: run and check a duecast app's tasks and handlers in the app's own tests, with no
MariaDB and no Redis (docs/testing.md). A face, like ./__init__.py: the helpers live in shared/testing.
"""

from duecast.shared.api.outcomes import InvalidAck, TimedOut
from duecast.shared.testing.calls import TestingError
from duecast.shared.testing.jobs import Drained, JobDead, JobRecord, Jobs
from duecast.shared.testing.rows import call_batch, call_row

__all__ = [
    "Drained",
    "InvalidAck",
    "JobDead",
    "JobRecord",
    "Jobs",
    "TestingError",
    "TimedOut",
    "call_batch",
    "call_row",
]
