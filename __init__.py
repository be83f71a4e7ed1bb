"""duecast's public API and command line: `from duecast import Registry, Ack, Enqueuer, Job`,
`current_job` (inside a task), and for topics `Publisher, Publish, Message`; the errors they raise
for MySQL, all under `DuecastError` (docs/jobs.md#errors).

Wiring only: the behaviour lives in `shared`, `dispatcher` and `worker`. This file is the face of the
repository's root, which is the package: its imports name `duecast` absolutely because pytest also
imports the root under the checkout's folder name, and must reach the one real `duecast` from there.
"""

from importlib import import_module
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from duecast.shared.acks import Ack, Row
    from duecast.shared.api.context import JobContext, current_job
    from duecast.shared.api.enqueue import DuplicateJob, EnqueueError, Enqueuer, Job, JobId, JobResult
    from duecast.shared.api.handlers import Registry
    from duecast.shared.api.messages import Message
    from duecast.shared.api.middleware import Middleware
    from duecast.shared.api.publish import Publish, Publisher, PublishError
    from duecast.shared.errors import DuecastError
    from duecast.shared.storage.units import NotConnected, StorageError, TransientError

# Each name's home, imported on first use (PEP 562), so that `import duecast` stays light: running
# `python -m duecast.worker` imports this package before the role's entry module, which pauses the
# garbage collector while the role's ~600 modules import (shared/process/collector.py). Imported
# here eagerly, they would be walked by ~130 collections first (docs/benchmarks.md, "Cold start").
_HOMES = {
    "Ack": "duecast.shared.acks",
    "Row": "duecast.shared.acks",
    "JobContext": "duecast.shared.api.context",
    "current_job": "duecast.shared.api.context",
    "DuplicateJob": "duecast.shared.api.enqueue",
    "EnqueueError": "duecast.shared.api.enqueue",
    "Enqueuer": "duecast.shared.api.enqueue",
    "Job": "duecast.shared.api.enqueue",
    "JobId": "duecast.shared.api.enqueue",
    "JobResult": "duecast.shared.api.enqueue",
    "Registry": "duecast.shared.api.handlers",
    "Message": "duecast.shared.api.messages",
    "Middleware": "duecast.shared.api.middleware",
    "Publish": "duecast.shared.api.publish",
    "Publisher": "duecast.shared.api.publish",
    "PublishError": "duecast.shared.api.publish",
    "DuecastError": "duecast.shared.errors",
    "NotConnected": "duecast.shared.storage.units",
    "StorageError": "duecast.shared.storage.units",
    "TransientError": "duecast.shared.storage.units",
}


def __getattr__(name: str) -> object:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'duecast' has no attribute {name!r}")
    value = getattr(import_module(home), name)
    globals()[name] = value  # once: later lookups are plain module attributes
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_HOMES})


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
