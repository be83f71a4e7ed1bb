"""Running the app's start and stop hooks (Registry.on_start / on_stop) once per worker process: plain
ones on the worker's thread, async ones on the event loop its async handlers run on, so what a hook
opens (an aiohttp session) belongs to the loop that uses it.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable
from typing import cast

from ..shared.api.lifespan import Hook, Hooks, hook_name, is_async
from ..shared.process.failures import StartupError
from .runner import LoopRunner

log = logging.getLogger("duecast.worker")


def run_start(hooks: Hooks, loop: LoopRunner) -> None:
    """Every on_start hook, in order; one that raises stops the start (one line naming it)."""
    for fn in hooks.start:
        try:
            _call(fn, loop)
        except Exception as exc:
            raise StartupError(f"the app's on_start hook {hook_name(fn)} failed: {exc!r}") from exc


def run_stop(hooks: Hooks, loop: LoopRunner) -> None:
    """Every on_stop hook, last registered first; one that raises is logged and the rest still run."""
    for fn in reversed(hooks.stop):
        try:
            _call(fn, loop)
        except Exception as exc:
            log.error(
                "the app's on_stop hook %s failed: %r",
                hook_name(fn),
                exc,
                extra={"event": "worker.stop_hook_failed", "hook": hook_name(fn)},
            )


def _call(fn: Hook, loop: LoopRunner) -> None:
    if is_async(fn):
        loop.run(cast(Awaitable[object], fn()))
    else:
        fn()
