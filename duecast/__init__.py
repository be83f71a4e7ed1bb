"""duecast's public API and command line: `from duecast import Registry, Ack, Enqueuer, Job`.

Wiring only: the behaviour lives in `shared`, `dispatcher` and `worker`.
"""

from shared.handlers import Ack, Registry, Row
from shared.jobs import DuplicateJob, EnqueueError, Enqueuer, Job

__all__ = ["Ack", "DuplicateJob", "EnqueueError", "Enqueuer", "Job", "Registry", "Row"]
