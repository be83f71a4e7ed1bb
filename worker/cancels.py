"""The worker's watch for cancels of the jobs it runs: while jobs run here, every jobs.lease_s/3 (the
lease renewal's cadence) one read of which of them were cancelled; those are flagged for
`current_job().cancelled` and their `async def` tasks cancelled (shared/api/context.py).
"""

from __future__ import annotations

import logging

from ..shared.api.context import cancel_held, held_jobs
from ..shared.errors import DuecastError
from ..shared.storage.job_cancels import JobCancels

log = logging.getLogger("duecast.worker")


class CancelWatch:
    """Asks MySQL about the jobs held here at most once per `every_s`; tick() is the worker's."""

    def __init__(self, cancels: JobCancels, every_s: float) -> None:
        self.cancels = cancels
        self.every_s = every_s
        self._next = 0.0  # monotonic time of the next read
        self.cancelled = 0  # running jobs this worker was told of

    def tick(self, now: float) -> None:
        if now < self._next:
            return
        self._next = now + self.every_s
        held = held_jobs()
        if not held:
            return
        try:
            found = self.cancels.cancelled_among(held)
        except DuecastError as exc:  # MySQL away: the next read asks again; a cancel only waits
            log.warning(
                "could not read the cancels of %d running job(s) (%s); asking again in %.1fs",
                len(held),
                exc,
                self.every_s,
                extra={"event": "worker.cancels_unread"},
            )
            return
        told = cancel_held(found)
        if told:
            self.cancelled += told
            log.info(
                "job(s) %s cancelled while running: async tasks cancelled, plain ones flagged",
                ", ".join(str(i) for i in sorted(found)),
                extra={"event": "worker.jobs_cancelled", "job_ids": sorted(found), "count": told},
            )
