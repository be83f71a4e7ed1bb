"""duecast's public API and command line: `from duecast import Registry, Ack, Enqueuer, Job`,
`current_job` (inside a task), and for topics `Publisher, Publish, Message`; the errors they raise
for MySQL, all under `DuecastError` (docs/jobs.md#errors).

Wiring only: the behaviour lives in `shared`, `dispatcher` and `worker`. This file is the face of the
repository's root, which is the package: its imports name `duecast` absolutely because pytest also
imports the root under the checkout's folder name, and must reach the one real `duecast` from there.
"""

from duecast.shared.acks import Ack, Row
from duecast.shared.api.context import JobContext, current_job
from duecast.shared.api.enqueue import DuplicateJob, EnqueueError, Enqueuer, Job, JobId, JobResult
from duecast.shared.api.handlers import Registry
from duecast.shared.api.messages import Message
from duecast.shared.api.middleware import Middleware
from duecast.shared.api.publish import Publish, Publisher, PublishError
from duecast.shared.errors import DuecastError
from duecast.shared.storage.units import NotConnected, StorageError, TransientError

__all__ = [
    "Ack",
    "DuecastError",
    "DuplicateJob",
    "EnqueueError",
    "Enqueuer",
    "Job",
    "JobContext",
    "JobId",
    "JobResult",
    "Message",
    "Middleware",
    "NotConnected",
    "Publish",
    "PublishError",
    "Publisher",
    "Registry",
    "Row",
    "StorageError",
    "TransientError",
    "current_job",
]
