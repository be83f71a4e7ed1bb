"""The HA tests' app (`--app tests.faults.servers.ha_app`): the fault tier's re-scan handler, and a task
that logs each run of a job to the same execution log ("jobs.default id attempt pid")."""

from __future__ import annotations

import os
import time
from typing import Any

from duecast import current_job
from tests.faults.app import handlers, log_execution

JOBS = "jobs.default"  # the "source" of a job's line in the execution log
__all__ = ["handlers"]


@handlers.task("ha_job")
def ha_job(_payload: Any) -> None:
    job = current_job()
    delay_s = int(os.environ.get("DUECAST_TEST_ROW_DELAY_MS", "0")) / 1000
    if delay_s:
        time.sleep(delay_s)
    log_execution(JOBS, {"id": job.id, "dc_attempt": job.attempt})
