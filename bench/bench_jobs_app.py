"""The workers' task module for bench/jobs.py: one no-op task."""

from __future__ import annotations

from typing import Any

from duecast import Registry

handlers = Registry()


@handlers.task("noop")
def noop(payload: Any) -> None:
    """Does nothing: returning None marks the job done (deleted, with jobs.retention_s = 0)."""
