"""duecast's public API and command line: `from duecast import Registry, Ack, Enqueuer, Job`,
`current_job` (inside a task), and for topics `Publisher, Publish, Message`.

Wiring only: the behaviour lives in `shared`, `dispatcher` and `worker`.
"""

from duecast.shared.acks import Ack, Row
from duecast.shared.api.context import JobContext, current_job
from duecast.shared.api.enqueue import DuplicateJob, EnqueueError, Enqueuer, Job, JobId
from duecast.shared.api.handlers import Registry
from duecast.shared.api.messages import Message
from duecast.shared.api.publish import Publish, Publisher, PublishError

__all__ = [
    "Ack",
    "DuplicateJob",
    "EnqueueError",
    "Enqueuer",
    "Job",
    "JobContext",
    "JobId",
    "Message",
    "Publish",
    "PublishError",
    "Publisher",
    "Registry",
    "Row",
    "current_job",
]
