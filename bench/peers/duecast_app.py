"""The duecast workers' handler module for the peer benchmark: one no-op task in the jobs source."""

from __future__ import annotations

from typing import Any

from duecast import Registry

handlers = Registry()


@handlers.task("noop")
def noop(payload: Any) -> None:
    """Does nothing: returning None acks the job with the jobs source's default (delete the row)."""
