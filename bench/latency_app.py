"""The latency benchmark's handler module (`--app latency_app`, bench/ on PYTHONPATH): one task, "stamp".

Each run of a job appends "<i> <t_sent> <t_start> <pid>" to the file named by
DUECAST_BENCH_STAMP_FILE: one os.write per line on an O_APPEND descriptor, atomic for a line this
small, so every worker process can share the file. t_start is time.time() when the handler starts.
"""

from __future__ import annotations

import os
import time
from typing import Any

from duecast import Registry

handlers = Registry()
STAMP_FILE_ENV = "DUECAST_BENCH_STAMP_FILE"


class _Stamps:
    """The stamp file's descriptor, opened at the first job (not at import) and kept open."""

    fd: int | None = None

    @classmethod
    def write(cls, line: str) -> None:
        if cls.fd is None:
            cls.fd = os.open(os.environ[STAMP_FILE_ENV], os.O_APPEND | os.O_WRONLY | os.O_CREAT, 0o644)
        os.write(cls.fd, line.encode())


@handlers.task("stamp")
def stamp(payload: Any) -> None:
    """Record when this job started; returning None deletes the job (the jobs source's default)."""
    started = time.time()
    _Stamps.write(f"{int(payload['i'])} {float(payload['t_sent']):.6f} {started:.6f} {os.getpid()}\n")
