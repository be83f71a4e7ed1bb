"""duecast's public API and command line: `from duecast import Registry, Ack, Enqueuer, Job`, and for
topics `Publisher, Publish, Message`.

Wiring only: the behaviour lives in `shared`, `dispatcher` and `worker`.
"""

from shared.handlers import Ack, Registry, Row
from shared.jobs import DuplicateJob, EnqueueError, Enqueuer, Job
from shared.messages import Message
from shared.topics import Publish, Publisher, PublishError

__all__ = [
    "Ack",
    "DuplicateJob",
    "EnqueueError",
    "Enqueuer",
    "Job",
    "Message",
    "Publish",
    "PublishError",
    "Publisher",
    "Registry",
    "Row",
]
